"""User code run by the `python` tool with no cell waiting (a `--background` cell, `dispatch()`).

Issue 12.5: nothing user code raises may kill the runtime thread; every submission settles.
Issue 12.6 (contract 11.5): an abort is recorded at once from the caller's thread, interrupts
the running code, and the submission settles `aborted` without the result reaching the model.
Every wait is bounded, so a regression fails instead of hanging.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))

from agents import make_agent, session  # noqa: E402

import flue_nb as flue  # noqa: E402
from flue_nb.models import ScriptedModel, reply, tool_call  # noqa: E402
from flue_nb.notebook.kernel.sandbox import kernel  # noqa: E402
from flue_nb.runtime.coordinator import coordinator  # noqa: E402
from flue_nb.runtime.messages import ToolResultMessage  # noqa: E402
from flue_nb.runtime.store import Outcome, SubmissionState  # noqa: E402

BOUND = 10.0


def _settled(s: Any, sid: str, bound: float = BOUND) -> Any:
    """Poll the store (this thread never waits on the runtime, as in a background cell)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        sub = s.store.submission(sid)
        if sub.state == SubmissionState.SETTLED:
            return sub
        time.sleep(0.02)
    raise AssertionError(f"{sid} did not settle within {bound} s: {s.store.submission(sid)}")


@pytest.mark.parametrize("exc", ["KeyboardInterrupt", "SystemExit", "GeneratorExit"])
def test_python_code_raising_base_exceptions_in_the_background_settles_and_the_runtime_survives(tmp_path, exc):
    ns: dict[str, Any] = {}
    model = ScriptedModel([reply("", tool_call("python", code=f"raise {exc}")), reply("done"), reply("next")])
    s = session(make_agent(model, sandbox=kernel(tmp_path, namespace=ns)))
    before = coordinator()
    sub = _settled(s, s.dispatch("go").submission_id)
    assert sub.outcome == Outcome.COMPLETED and sub.result == "done"
    result = next(m for m in model.requests[1].messages if isinstance(m, ToolResultMessage))
    assert result.is_error and exc in result.content
    assert coordinator() is before and before.thread.is_alive()
    assert s.prompt("and again", timeout=BOUND) == "next"


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_a_custom_tool_raising_base_exceptions_on_the_runtime_loop_fails_its_submission_only(exc):
    @flue.tool
    async def explode() -> str:
        """Raise what the test says."""
        raise exc()

    model = ScriptedModel([reply("", tool_call("explode")), reply("next")])
    s = session(make_agent(model, tools=(explode,)))
    before = coordinator()
    sub = _settled(s, s.dispatch("go").submission_id)
    assert sub.outcome == Outcome.FAILED and exc.__name__ in sub.error["message"]
    assert coordinator() is before and before.thread.is_alive()
    assert s.prompt("and again", timeout=BOUND) == "next"


def _busy_agent(tmp_path: Path, code: str) -> tuple[Any, ScriptedModel, dict[str, Any]]:
    ns: dict[str, Any] = {"ticks": 0}
    model = ScriptedModel([reply("", tool_call("python", code=code)), reply("the result reached the model")])
    return session(make_agent(model, sandbox=kernel(tmp_path, namespace=ns))), model, ns


def _started(ns: dict[str, Any], key: str = "ticks") -> None:
    deadline = time.monotonic() + BOUND
    while not ns.get(key) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ns.get(key), "the code never started"


def test_abort_interrupts_running_python_code_and_settles_aborted_at_once(tmp_path):
    s, model, ns = _busy_agent(tmp_path, "import time\nwhile True:\n    ticks += 1\n    time.sleep(0.001)")
    receipt = s.dispatch("loop forever")
    _started(ns)
    t0 = time.monotonic()
    assert s.abort() == [receipt.submission_id]
    took = time.monotonic() - t0
    assert s.store.submission(receipt.submission_id).abort_requested  # durable before abort() returned
    sub = _settled(s, receipt.submission_id, 5.0)
    assert took < 5 and sub.outcome == Outcome.ABORTED  # the loop never ends: abort() did not wait for it
    ticks = ns["ticks"]
    time.sleep(0.2)
    assert ns["ticks"] == ticks, "the code kept running after the abort"
    assert len(model.requests) == 1, "the interrupted call's result was sent to the model"


def test_abort_while_code_is_blocked_in_a_c_call_settles_at_once_and_drops_the_result(tmp_path):
    s, model, ns = _busy_agent(tmp_path, "import time\nstarted = True\ntime.sleep(3)\nfinished = True")
    receipt = s.dispatch("sleep")
    _started(ns, "started")
    t0 = time.monotonic()
    s.abort()
    sub = _settled(s, receipt.submission_id, 5.0)
    assert time.monotonic() - t0 < 2.5 and sub.outcome == Outcome.ABORTED  # not the 3 s the call takes
    deadline = time.monotonic() + 10
    while threading.active_count() and "finished" not in ns and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)
    assert len(model.requests) == 1, "the result of the aborted call reached the model"
    assert s.prompt("next", timeout=BOUND) == "the result reached the model"
