"""Every view of a conversation says the same thing, in real kernels (issue 19.2, 19.3, 19.6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernel_helpers import Kernel

pytest.importorskip("anywidget", reason="the chat widget needs the `widget` extra")

pytestmark = pytest.mark.kernel

SETUP = """\
import json, time
import flue_nb as flue
from flue_nb.models import ScriptedModel
from flue_nb.notebook.chat.widget import open_widgets
%config FlueMagics.db = 'flue.sqlite'
other = ScriptedModel(["the default assistant answers"] * 5)
%config FlueMagics.model = 'other'
hm = ScriptedModel(["helper answers"] * 5)

@flue.agent
def helper():
    flue.use_model(hm)
    return "Be brief."

def settled(w, n):
    for _ in range(300):
        subs = [b for b in w.history if b["kind"] == "submission"]
        if len(subs) >= n and subs[n - 1]["outcome"]:
            return subs[n - 1]
        time.sleep(0.05)
    raise AssertionError(f"no settled block {n}: {w.history} {w.live}")

def answer(block):
    return [p["text"] for p in block["parts"] if p["kind"] == "text"][-1]
"""


def test_subcommands_never_switch_the_agent_of_a_chat_19_2(tmp_path: Path) -> None:
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP)
        kernel.ok("%flue chat --agent helper -c a1")
        kernel.ok("w = open_widgets()[-1]")
        for command in ("%flue status", "%flue abort", "%flue history", "%flue compact"):
            kernel.ok(command)
        kernel.ok("w.send_message('who answers?')")
        first = json.loads(kernel.ok("print(json.dumps([answer(settled(w, 1)), w.status]))").stdout)
        # A new cell (no --agent) continues with the chosen agent, and so does the chat.
        cell = kernel.ok("%%flue --no-widget\nand now?")
        kernel.ok("w.send_message('still you?')")
        second = json.loads(kernel.ok("print(json.dumps([answer(settled(w, 3)), w.status]))").stdout)
        # Only an explicit choice switches, and the chat's title follows it before any reply.
        kernel.ok("%flue use assistant")
        switched = json.loads(kernel.ok("time.sleep(0.2); print(json.dumps(w.status))").stdout)
        kernel.ok("w.send_message('and you?')")
        third = json.loads(kernel.ok("print(json.dumps([answer(settled(w, 4)), w.status]))").stdout)
    finally:
        kernel.shutdown()
    assert first[0] == "helper answers" and first[1]["agent"] == "helper", first
    assert "helper answers" in cell.text()
    assert second[0] == "helper answers" and second[1]["agent"] == "helper", second
    assert switched["agent"] == "assistant" and "other" in switched["model"], switched
    assert third[0] == "the default assistant answers" and third[1]["agent"] == "assistant", third


def test_a_frontend_shutdown_aborts_the_kernels_chat_run_durably_19_6(tmp_path: Path) -> None:
    """Shut Down / Restart from the frontend aborts the chat's run; it is not re-run on reopen."""
    from flue_nb.runtime.session import open_conversation

    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP + "\nslow = ScriptedModel([' '.join(f'w{i}' for i in range(3000))], delay=0.01)")
        kernel.ok("%flue chat -c sd -m slow")
        kernel.ok("w = open_widgets()[-1]; w.send_message('a long answer')")
        kernel.ok("for _ in range(200):\n    if w.live and w.live[0]['parts']: break\n    time.sleep(0.05)")
        kernel.kc.shutdown()  # the frontend's Shut Down Kernel (and half of Restart)
        kernel.km.provisioner.process.wait(30)
    finally:
        kernel.shutdown()
    [sub] = open_conversation("sd", db=str(tmp_path / "flue.sqlite")).submissions()
    assert sub.abort_requested or (sub.outcome is not None and sub.outcome.value == "aborted"), sub
