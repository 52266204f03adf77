"""`%flue mcp` in a real kernel: the servers this kernel connected to, and their tools."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from kernel_helpers import Kernel

pytestmark = pytest.mark.kernel

SERVER = Path(__file__).parent.parent / "runtime" / "mcp_server.py"

SETUP = f"""
import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call

model = ScriptedModel([reply("", tool_call("mcp__calc__add", a=20, b=22)), reply("It is 42.")])

@flue.agent
def calculator():
    flue.use_model(model)
    flue.use_mcp("calc", command=[{sys.executable!r}, {str(SERVER)!r}], tools=["add", "pid"])
    return "Use the calculator."
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("jupyter"), tmp_path_factory.mktemp("work"))
    k.ok(SETUP)
    yield k
    k.ok("from flue_nb.runtime.tools.mcp import close_mcp_servers; close_mcp_servers()")
    k.shutdown()


def test_flue_mcp_says_how_to_declare_a_server_before_any_is_used(kernel):
    assert "flue.use_mcp(" in kernel.ok("%flue mcp").text()


def test_flue_mcp_lists_a_connected_server_and_its_mounted_tools(kernel):
    run = kernel.ok("%flue -a calculator --db :memory: what is 20 + 22?")
    assert "It is 42." in run.text()
    shown = kernel.ok("%flue mcp")
    assert "calc (connected)" in shown.text()
    assert "mcp__calc__add" in shown.text() and "mcp__calc__pid" in shown.text()
    assert "`mcp__calc__add`" in shown.text("text/markdown")
