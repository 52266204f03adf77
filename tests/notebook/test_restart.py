"""A kernel restart in the middle of a run: the next `%flue` recovers it and shows what happened."""

from __future__ import annotations

import textwrap
import time

import pytest
from kernel_helpers import Kernel

from flue_nb.notebook.document.identity import default_conversation_id
from flue_nb.runtime.store.sqlite import open_store

pytestmark = pytest.mark.kernel

AGENT_MODULE = '''
"""A test agent both kernels import: slow on "slow ...", quick once it was interrupted."""
import flue_nb as flue
from flue_nb.models import FunctionModel, reply

def answer(request):
    last = request.messages[-1]
    if last.kind == "user" and not last.text.startswith("slow"):
        return reply("echo: " + last.text)
    if any(m.kind == "signal" for m in request.messages):
        return reply("Recovered: finished the long answer.")
    return reply(" ".join(f"w{i}" for i in range(400)))

model = FunctionModel(answer, delay=0.05)

@flue.agent
def slow():
    flue.use_model(model)
    return "A test agent."
'''

SETUP = "import sys; sys.path.insert(0, {path!r}); from slowagent import slow\n%config FlueMagics.lease_ttl = 2.0"


@pytest.mark.parametrize("pause", [0.0, 3.0], ids=["lease-still-held", "lease-expired"])
def test_restart_mid_run_is_recovered_by_the_next_cell(tmp_path, pause):
    # With the old lease expired, opening the conversation starts recovery at once, possibly
    # before the cell watches its events: the cell must still say what happened.
    (tmp_path / "slowagent.py").write_text(textwrap.dedent(AGENT_MODULE))
    # The notebook path names the default conversation, so the new kernel reopens the same one.
    kernel = Kernel(tmp_path / "jupyter", tmp_path, JPY_SESSION_NAME=str(tmp_path / "analysis.ipynb"))
    try:
        kernel.ok(SETUP.format(path=str(tmp_path)))
        kernel.ok("%flue use slow")
        kernel.ok("%config FlueMagics.live = 'always'")  # as a person watching: the cell streams
        msg_id = kernel.send("%%flue\nslow: write a long answer")
        kernel.collect(msg_id, timeout=30, until=lambda run: "w20" in run.text())
        time.sleep(0.5)  # past the runtime's partial-stream snapshot interval
        kernel.restart()

        kernel.ok(SETUP.format(path=str(tmp_path)))
        time.sleep(pause)
        started = time.monotonic()
        run = kernel.ok("%flue -a slow and now?", timeout=60)
        took = time.monotonic() - started
    finally:
        kernel.shutdown()

    text = run.text()
    assert "↻ recovering submission sub_" in text
    assert "↻ recovered submission sub_" in text and ": settled completed" in text
    assert "echo: and now?" in text and text.endswith("[✓ completed]")
    assert took < 15, f"recovery took {took:.1f} s"

    conversation = default_conversation_id({"JPY_SESSION_NAME": str(tmp_path / "analysis.ipynb")})
    store = open_store(str(tmp_path / ".flue" / "flue.sqlite"), cwd=str(tmp_path))
    try:
        first, second = store.submissions(conversation)  # exactly two: nothing lost or duplicated
    finally:
        store.close()
    assert (first.text, first.outcome.value, first.attempts) == (
        "slow: write a long answer",
        "completed",
        2,
    )
    assert first.result == "Recovered: finished the long answer."
    assert (second.outcome.value, second.result) == ("completed", "echo: and now?")
