"""After a kernel is killed mid-run, the next `%flue` takes over at once and shows both answers.

Issue 12.8: the dead kernel's 30 s lease is not waited out (its process is provably gone), and
the cell shows the recovered submission's answer on its own line, then answers the new message.
"""

from __future__ import annotations

import textwrap
import time

import pytest
from kernel_helpers import Kernel

pytestmark = pytest.mark.kernel

# The same slow agent as the restart test: slow on "slow ...", quick once it was interrupted.
from test_restart import AGENT_MODULE  # noqa: E402

# Unlike the restart test's setup, the lease keeps its default 30 s: the take-over must not wait.
SETUP = "import sys; sys.path.insert(0, {path!r}); from slowagent import slow"


def test_a_killed_kernel_is_taken_over_at_once_and_the_cell_shows_both_answers(tmp_path):
    (tmp_path / "slowagent.py").write_text(textwrap.dedent(AGENT_MODULE))
    kernel = Kernel(tmp_path / "jupyter", tmp_path, JPY_SESSION_NAME=str(tmp_path / "nb.ipynb"))
    try:
        kernel.ok(SETUP.format(path=str(tmp_path)))  # the default 30 s lease
        kernel.ok("%flue use slow")
        kernel.ok("%config FlueMagics.live = 'always'")  # as a person watching: the cell streams
        msg_id = kernel.send("%%flue\nslow: write a long answer")
        kernel.collect(msg_id, timeout=30, until=lambda run: "w20" in run.text())
        time.sleep(0.5)  # past the partial-stream snapshot interval
        kernel.restart()
        kernel.ok(SETUP.format(path=str(tmp_path)))
        run = kernel.ok("%flue -a slow and now?", timeout=20)  # < the lease: it was not waited out
    finally:
        kernel.shutdown()
    text = run.text()
    assert "waiting up to" not in text, text
    assert "↻ recovered submission sub_" in text and ": settled completed" in text, text
    lines = text.splitlines()
    assert "Recovered: finished the long answer." in lines, text
    assert "echo: and now?" in lines and text.endswith("[✓ completed]"), text
    assert lines.index("Recovered: finished the long answer.") < lines.index("echo: and now?")


RECOVERY_SETUP = """
from flue_nb.models import FunctionModel, ScriptedModel, reply, tool_call
recmodel = ScriptedModel([reply("", tool_call("python", code="x_set_by_recovery = 1")), reply("recovered done")])
echo = FunctionModel(lambda req: reply("echo"))
%config FlueMagics.db = 'flue.sqlite'
"""


def test_a_recovered_submission_keeps_the_approval_its_cell_was_admitted_with(tmp_path):
    # As a killed kernel leaves it: admitted by `%flue -m recmodel --approval deny ...`, running,
    # its owner gone. The next cell runs with the default `allow`.
    from flue_nb.runtime.store import SubmissionState
    from flue_nb.runtime.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "flue.sqlite")
    now = time.time()
    store.admit(
        "notebook",
        "set a variable",
        submission_id="sub_crashed",
        now=now - 5,
        settings={"agent": "assistant", "model": "recmodel", "approval": "deny"},
    )
    store.acquire_lease("notebook", "gone-host:1:0", ttl=0.01)
    store.update_submission("sub_crashed", state=SubmissionState.RUNNING, attempts=1, started_at=now - 5)
    store.close()
    time.sleep(0.05)  # the dead owner's lease has lapsed
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(RECOVERY_SETUP)
        run = kernel.ok("%flue -m echo hello", timeout=30)
        seen = kernel.ok(
            "print('x_set_by_recovery' in globals(), "
            "[m.content for m in recmodel.requests[1].messages if m.kind == 'tool_result'])"
        ).stdout
    finally:
        kernel.shutdown()
    assert "↻ recovered submission sub_crashed: settled completed" in run.text(), run.text()
    assert seen.startswith("False "), seen  # `deny` held: the code never ran
    assert "approval policy denies this `python` call" in seen, seen
