"""`%%flue --max-cost USD` and `c.FlueMagics.max_cost_usd`: a cell stops at its budget (issue 26.3)."""

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

# claude-sonnet-4-6 at list prices: 100,000 in and 1,000 out is $0.315 a call.
looping = FunctionModel(lambda req: reply("", tool_call("noop"), usage=(100_000, 1_000)), id="claude-sonnet-4-6")

@flue.agent
def spender():
    flue.use_model(looping)
    flue.use_tool(noop)
"""


def test_max_cost_option_and_setting_stop_the_cell_and_say_what_was_spent(tmp_path):
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP)
        run = kernel.run("%%flue -a spender --max-cost 1.00\nspend", timeout=60)
        calls = kernel.ok("print(len(looping.requests))").stdout.strip()
        kernel.ok("%config FlueMagics.max_cost_usd = 0.5")
        default = kernel.run("%flue -a spender spend again", timeout=60)
        after = kernel.ok("print(len(looping.requests))").stdout.strip()
        bad = kernel.run("%config FlueMagics.max_cost_usd = -1", timeout=30)
        status = kernel.ok("%flue -a spender status").all_text()
    finally:
        kernel.shutdown()
    text = run.all_text()
    assert run.status == "error" and "budget_exceeded" in text and "$0.9450 of its $1.00" in text, text
    assert "Traceback" not in text
    assert "$0.9450 of its $1.00 budget spent" in text  # the 80 % note, in the cell
    assert calls == "3"
    assert default.status == "error" and "of its $0.50 budget" in default.all_text()
    assert after == "4"  # one call of $0.315: a second would pass $0.50
    assert "max_cost_usd takes dollars" in bad.all_text()
    # The scripted responses report no cache reads: 0 % of 400,000 prompt tokens.
    assert "cache: 0 % of prompt tokens read from cache" in status, status
