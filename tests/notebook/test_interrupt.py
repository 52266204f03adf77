"""The stop button (SIGINT to the kernel) during a blocking `%%flue` cell aborts durably."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kernel_helpers import Kernel

from flue_nb.runtime.store.sqlite import open_store

pytestmark = pytest.mark.kernel

SLEEP = "31.4159"  # an unusual duration, so the test finds exactly its own `sleep`


def _sleepers() -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argv[:2] == [b"sleep", SLEEP.encode()] and state != "Z":
            found.append(int(pid))
    return found


def _wait_for(cond, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def kernel(tmp_path):
    k = Kernel(tmp_path / "jupyter", tmp_path)
    yield k
    k.shutdown()


def test_interrupt_aborts_the_submission_kills_bash_and_the_next_cell_works(kernel, tmp_path):
    kernel.ok(
        "from flue_nb.models import ScriptedModel, reply, tool_call\n"
        f"m = ScriptedModel([reply('Sleeping.', tool_call('bash', command='sleep {SLEEP}')), "
        "reply('after the abort')])"
    )
    msg_id = kernel.send("%%flue -c stop -m m --db flue.sqlite\nsleep for a while")
    assert _wait_for(lambda: bool(_sleepers())), "the bash tool never started its command"
    started = time.monotonic()
    kernel.interrupt()
    run = kernel.collect(msg_id, timeout=30)
    took = time.monotonic() - started

    assert run.status == "error"
    assert "interrupted: the submission was aborted" in run.error_text
    assert "Traceback" not in run.error_text
    assert "■ aborted" in run.text() and "· bash: sleep 31.4159" in run.text()
    assert took < 10, f"the abort took {took:.1f} s"
    assert _wait_for(lambda: not _sleepers(), 5.0), "the bash command survived the abort"

    store = open_store(str(tmp_path / "flue.sqlite"), cwd=str(tmp_path))
    (sub,) = store.submissions("stop")
    assert sub.state.value == "settled" and sub.outcome.value == "aborted"

    after = kernel.ok("%flue -c stop -m m --db flue.sqlite carry on")
    assert "after the abort" in after.text() and "[✓ completed]" in after.text()
    outcomes = [s.outcome.value for s in store.submissions("stop")]
    assert outcomes == ["aborted", "completed"]
    store.close()


def test_interrupt_while_the_python_tool_runs_user_code_on_the_main_thread(kernel, tmp_path):
    kernel.ok(
        "from flue_nb.models import ScriptedModel, reply, tool_call\n"
        "loop = 'import time\\nfor i in range(600): time.sleep(0.05)'\n"
        "m = ScriptedModel([reply('', tool_call('python', code=loop)), reply('next one')])"
    )
    kernel.ok("%config FlueMagics.live = 'always'")  # as a person watching: the cell streams
    msg_id = kernel.send("%flue -c py -m m --db flue.sqlite spin")
    kernel.collect(msg_id, timeout=30, until=lambda run: "· python" in run.text())
    time.sleep(0.3)
    kernel.interrupt()
    run = kernel.collect(msg_id, timeout=15)  # the runtime thread survived: the cell ends
    assert run.status == "error" and "interrupted: the submission was aborted" in run.error_text
    assert "· python: import time… ✗" in run.text()
    after = kernel.ok("%flue -c py -m m --db flue.sqlite and now")
    assert "next one" in after.text()
    store = open_store(str(tmp_path / "flue.sqlite"), cwd=str(tmp_path))
    assert [s.outcome.value for s in store.submissions("py")] == ["aborted", "completed"]
    store.close()


def test_interrupt_while_run_cell_runs_stops_the_agent(kernel, tmp_path):
    # Issue 32.7: IPython's run_cell took the KeyboardInterrupt as the cell's error; the agent
    # read it as a tool result and went on to its next tool call.
    marker = tmp_path / "next-call-ran"
    kernel.ok(
        "from flue_nb.models import ScriptedModel, reply, tool_call\n"
        "loop = 'import time\\nfor i in range(600): time.sleep(0.05)'\n"
        "m = ScriptedModel([reply('', tool_call('run_cell', source=loop)),\n"
        f"    reply('', tool_call('bash', command='touch {marker}')), reply('done'), reply('next one')])"
    )
    kernel.ok("%config FlueMagics.live = 'always'")
    msg_id = kernel.send("%flue -c rc -m m --db flue.sqlite spin")
    kernel.collect(msg_id, timeout=30, until=lambda run: "· run_cell" in run.text())
    time.sleep(0.3)
    kernel.interrupt()
    run = kernel.collect(msg_id, timeout=15)
    assert run.status == "error" and "interrupted: the submission was aborted" in run.error_text, run.text()
    assert not marker.exists(), "the tool call after the interrupted cell ran"
    store = open_store(str(tmp_path / "flue.sqlite"), cwd=str(tmp_path))
    assert [s.outcome.value for s in store.submissions("rc")] == ["aborted"]
    store.close()
