"""`%%flue --max-turns N`: a cell's own turn limit ends a runaway loop (issue 12.9)."""

from __future__ import annotations

import pytest
from kernel_helpers import Kernel

pytestmark = pytest.mark.kernel

SETUP = """
import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call

@flue.tool
def noop() -> str:
    "Do nothing."
    return "ok"

looping = FunctionModel(lambda req: reply("", tool_call("noop")))

@flue.agent
def loopy():
    flue.use_model(looping)
    flue.use_tool(noop)
"""


def test_max_turns_option_caps_the_cells_model_calls(tmp_path):
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP)
        run = kernel.run("%%flue -a loopy --max-turns 3\nloop forever", timeout=60)
        calls = kernel.ok("print(len(looping.requests))").stdout.strip()
        bad = kernel.run("%flue -a loopy --max-turns 0 hi", timeout=30)
    finally:
        kernel.shutdown()
    text = run.all_text()
    assert run.status == "error" and "turn_limit_exceeded" in text and "Traceback" not in text, text
    assert calls == "3"
    assert bad.status == "error" and "max_turns must be a positive int" in bad.all_text()
