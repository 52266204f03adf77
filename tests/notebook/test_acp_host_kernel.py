"""`%flue chat --agent acp:COMMAND` in a real kernel: a scripted ACP agent (tests/acp_scripted_agent.py)
in the flue chat: its text streams into the widget, its calls are cards, its permission request is
answered with the card's Approve, its `python` call goes through this kernel's `%flue serve` (the
MCP server it was given) and changes the namespace once flue_nb's approval lets it (asked on the
call's card when the agent did not ask, not asked again when it did, refused when it reported the
call to no one), Stop cancels its turn, and the store keeps the conversation."""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_helpers import Kernel, chat_helpers

pytest.importorskip("acp")
pytest.importorskip("anywidget", reason="the chat widget needs the `widget` extra")

pytestmark = pytest.mark.kernel

SCRIPTED = Path(__file__).resolve().parents[1] / "acp_scripted_agent.py"
SPEC = "acp:" + shlex.join([sys.executable, str(SCRIPTED)])

SETUP = f"""\
import json, time
import flue_nb as flue
from flue_nb.notebook.views.chat.widget import open_widgets
%config FlueMagics.db = 'flue.sqlite'
%flue chat --agent {json.dumps(SPEC)}
w = open_widgets()[-1]
def done(n):
    found = [b for b in w.history if b['kind'] == 'submission' and b['outcome']]
    return found[n - 1] if len(found) >= n else None
def settled(n):
    return wait_for(lambda: done(n), 'settled')
""" + chat_helpers(tries=600)


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[tuple[Kernel, Path]]:
    kernel = Kernel(tmp_path / "jupyter", tmp_path, SCRIPTED_ACP_LOG=str(tmp_path / "agent.log"))
    try:
        kernel.ok(SETUP)
        yield kernel, tmp_path
    finally:
        kernel.shutdown()


def texts(block: dict[str, Any]) -> list[str]:
    return [p["text"] for p in block["parts"] if p["kind"] == "text"]


def _log(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "agent.log").read_text().splitlines()]


def _out(kernel: Kernel, code: str) -> Any:
    return json.loads(kernel.ok(code, timeout=120).stdout)


def _poll(kernel: Kernel, expression: str, what: str, timeout: float = 120.0) -> Any:
    """`expression` evaluated by short cells until it is truthy: between them the kernel's main
    thread is free, and the agent's calls into the kernel run there (between cells, as a cell's)."""
    deadline = time.monotonic() + timeout
    while True:
        value = _out(kernel, f"print(json.dumps({expression}))")
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never {what}")
        time.sleep(0.2)


def test_the_agents_text_streams_into_the_chat_and_the_store_keeps_it(chat):
    kernel, tmp_path = chat
    block, status = _out(kernel, "w.send_message('hello'); print(json.dumps([settled(1), w.status]))")
    assert (block["text"], block["outcome"]) == ("hello", "completed")
    assert texts(block) == ["Hello from the scripted agent."]
    assert [p["text"] for p in block["parts"] if p["kind"] == "thinking"] == ["A greeting."]
    assert status["agent"] == SPEC
    [event] = [e for e in _log(tmp_path) if e["event"] == "new_session"]
    assert event["servers"] == ["flue-kernel"]  # this kernel, through `%flue serve`
    from flue_nb.notebook.document.identity import default_conversation_id
    from flue_nb.runtime.session import open_conversation

    [sub] = open_conversation(default_conversation_id({}), db=str(tmp_path / "flue.sqlite")).submissions()
    assert (sub.text, sub.outcome.value, sub.result) == ("hello", "completed", "Hello from the scripted agent.")


def test_the_agents_permission_request_is_answered_with_the_cards_approve(chat):
    kernel, tmp_path = chat
    card = _out(
        kernel,
        "w.send_message('please write a note')\n"
        "card = wait_for(lambda: [c for c in tool_cards(w.history + w.live) if c.get('ask')], 'asked')[0]\n"
        "print(json.dumps(card))",
    )
    assert card["name"] == "acp_edit" and card["ask"] == "acp_edit: Write note.txt", card
    block = _out(kernel, f"assert w.answer({card['call_id']!r}, True)\nprint(json.dumps(settled(1)))")
    assert (tmp_path / "note.txt").read_text() == "from the scripted agent\n"
    assert block["outcome"] == "completed" and texts(block)[-1] == "Wrote note.txt."
    [done] = [p for p in block["parts"] if p["kind"] == "tool"]
    assert done["status"] == "ok" and done["approval"]["approved"] is True, done
    assert [e["option"] for e in _log(tmp_path) if e["event"] == "permission"] == ["yes"]


def _asked(kernel: Kernel) -> dict[str, Any]:
    """The first card of the chat that asks for an answer."""
    return _out(
        kernel,
        "card = wait_for(lambda: [c for c in tool_cards(w.history + w.live) if c.get('ask')], 'asked')[0]\n"
        "print(json.dumps(card))",
    )


def _served(kernel: Kernel) -> list[str]:
    """What the kernel's record of the agent's calls into it says of each (`<conversation>:acp-calls`)."""
    return _out(
        kernel,
        "from flue_nb.runtime.session import open_conversation\n"
        "from flue_nb.notebook.document.identity import default_conversation_id\n"
        "c = open_conversation(default_conversation_id() + ':acp-calls', db='flue.sqlite')\n"
        "print(json.dumps([f'{s.outcome.value}: {s.result}' for s in c.submissions()]))",
    )


def _defined(kernel: Kernel) -> bool:
    return kernel.ok("print('hosted' in globals())").stdout.strip() == "True"


def test_an_agent_that_never_asks_works_in_this_kernel_once_its_calls_card_approves(chat):
    kernel, tmp_path = chat
    kernel.ok("w.send_message('use the kernel')")
    # The agent reported its call but asked nothing: flue_nb asks on that call's card.
    card = _asked(kernel)
    assert card["name"] == "acp_execute" and card["ask"] == "acp_execute: python: hosted = 6 * 7", card
    assert not _defined(kernel)  # nothing ran while the card waited
    kernel.ok(f"assert w.answer({card['call_id']!r}, True)")
    block = _poll(kernel, "done(1)", "settled")
    assert texts(block)[-1] == "The kernel says: 42"
    [done] = [p for p in block["parts"] if p["kind"] == "tool"]
    assert done["name"] == "acp_execute" and done["status"] == "ok", done
    assert done["approval"]["approved"] is True and done["approval"]["reason"] == "approved", done
    assert kernel.ok("print(hosted)").stdout.strip() == "42"  # the agent's code ran in this namespace
    # The kernel recorded the served call too, beside the conversation that asked for it.
    assert _served(kernel) == ["completed: `python` ran; its result went back to the client."]


def test_a_call_into_this_kernel_denied_on_its_card_does_not_run(chat):
    kernel, tmp_path = chat
    kernel.ok("w.send_message('use the kernel')")
    card = _asked(kernel)
    kernel.ok(f"assert w.answer({card['call_id']!r}, False)")
    block = _poll(kernel, "done(1)", "settled")
    said = texts(block)[-1]
    assert said.startswith("The kernel says: ") and "declined" in said, said
    [done] = [p for p in block["parts"] if p["kind"] == "tool"]
    assert done["approval"]["approved"] is False and done["approval"]["reason"] == "declined", done
    assert not _defined(kernel)
    assert _served(kernel) == ["completed: `python` failed; its result went back to the client."]


def test_a_call_the_agent_asked_permission_for_is_not_asked_about_again(chat):
    kernel, tmp_path = chat
    kernel.ok("w.send_message('ask first, then use the kernel')")
    card = _asked(kernel)  # the agent's own request
    kernel.ok(f"assert w.answer({card['call_id']!r}, True)")
    # Its call into the kernel runs on the pass the grant left: no second question holds it.
    block = _poll(kernel, "done(1)", "settled")
    assert texts(block)[-1] == "The kernel says: 42"
    assert [e["option"] for e in _log(tmp_path) if e["event"] == "permission"] == ["yes"]
    assert kernel.ok("print(hosted)").stdout.strip() == "42"
    assert _served(kernel) == ["completed: `python` ran; its result went back to the client."]


def test_a_call_into_this_kernel_the_agent_reports_to_no_one_is_refused(chat):
    kernel, tmp_path = chat
    kernel.ok("w.send_message('sneak into the kernel')")
    block = _poll(kernel, "done(1)", "settled")
    said = texts(block)[-1]
    assert "reported no tool call with these arguments" in said and "did not run" in said, said
    assert [p for p in block["parts"] if p["kind"] == "tool"] == []  # no card: nothing was shown
    assert not _defined(kernel)
    assert _served(kernel) == ["completed: `python` failed; its result went back to the client."]


def test_stop_cancels_the_agents_turn(chat):
    kernel, tmp_path = chat
    block = _out(
        kernel,
        "w.send_message('wait for me')\n"
        "wait_for(lambda: 'Waiting.' in json.dumps(w.live), 'waiting')\n"
        "w._on_browser_msg(w, {'type': 'stop'}, [])\n"
        "print(json.dumps(settled(1)))",
    )
    assert block["outcome"] == "aborted", block
    assert "cancel" in [e["event"] for e in _log(tmp_path)]
    again = _out(kernel, "w.send_message('hello'); print(json.dumps(settled(2)))")
    assert texts(again) == ["Hello from the scripted agent."]


def test_flue_use_makes_the_cells_talk_to_the_acp_agent(tmp_path):
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok("%config FlueMagics.db = 'flue.sqlite'")
        chose = kernel.ok(f"%flue use {SPEC}")
        cell = kernel.ok("%%flue --no-widget\nhello", timeout=120)
        again = kernel.ok("%flue status")
    finally:
        kernel.shutdown()
    assert f"now talks to the ACP agent `{SPEC}`" in chose.stdout
    assert "Hello from the scripted agent." in cell.all_text()
    assert SPEC in again.all_text()
