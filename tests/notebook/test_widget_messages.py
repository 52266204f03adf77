"""The chat widget's browser messages are checked (issue 20.7): `approve` takes only a real
boolean, `send` only a string, and anything malformed is ignored without a traceback."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from test_widget import _session, _tool, _until

from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.notebook.views.chat.widget import ChatWidget

pytest.importorskip("anywidget")


def browser(w: ChatWidget, content: Any) -> None:
    """Deliver `content` the way the frontend's `model.send(...)` arrives (ipywidgets' dispatch)."""
    w._handle_custom_msg(content, [])


def test_approve_takes_only_a_real_boolean_and_send_only_a_string(tmp_path: Path, caplog: Any) -> None:
    model = ScriptedModel([reply("", tool_call("bash", "m1", command="echo ran > a.txt")), reply("refused")])
    session = _session(tmp_path, model, approval="ask", cid="messages")
    w = ChatWidget(session)
    try:
        _check(w, session, tmp_path, caplog)
    finally:
        w.close()  # an open widget would be asked about other tests' calls


def _check(w: ChatWidget, session: Any, tmp_path: Path, caplog: Any) -> None:
    receipt = w.send_message("go")
    _until(lambda: _tool(w, "m1").get("status") == "awaiting_approval")
    caplog.set_level(logging.DEBUG)
    for bad in (
        {"type": "approve", "call_id": "m1", "approved": "false"},  # a string: truthy, not an answer
        {"type": "approve", "call_id": "m1", "approved": 1},
        {"type": "approve", "call_id": "m1"},
        {"type": "approve", "call_id": ["m1"], "approved": True},
        {"type": 7},
        {"no": "type"},
        ["not", "a", "dict"],
        None,
    ):
        browser(w, bad)
    assert _tool(w, "m1").get("status") == "awaiting_approval"  # none of them answered
    browser(w, {"type": "send", "text": 12345})
    assert "text must be a string" in w.error
    assert [s.text for s in session.submissions()] == ["go"]  # nothing admitted
    browser(w, {"type": "approve", "call_id": "m1", "approved": False})
    session.read(receipt)
    assert not (tmp_path / "a.txt").exists()
    assert not [r for r in caplog.records if r.exc_info], "a malformed message logged a traceback"


def test_the_kernel_beats_to_every_open_chat_so_a_view_can_tell_its_kernel_is_gone(tmp_path: Path) -> None:
    from flue_nb.notebook.views.chat import _heartbeat

    session = _session(tmp_path, ScriptedModel([reply("hi")]), cid="beats")
    w, closed = ChatWidget(session), ChatWidget(session)
    closed.close()
    assert w.ref == w.model_id and w.ref  # the browser names its own model in the saved state
    assert _heartbeat._running is not None  # a chat started the kernel's one heartbeat thread
    got: list[Any] = []
    to_closed: list[Any] = []
    w.send = got.append  # type: ignore[method-assign]
    closed.send = to_closed.append  # type: ignore[method-assign]
    hb = _heartbeat.Heartbeat(lambda: [w, closed], every=0.02)
    try:
        # hb's own count: the kernel's heartbeat thread beats to `w` too, so `got` can run ahead.
        _until(lambda: hb.sent >= 3)
    finally:
        hb.stop()
        w.close()
    _until(lambda: not hb._thread.is_alive())  # stop()'s join is bounded: a loaded beat may still count
    assert set(map(str, got)) == {str({"type": "beat"})}
    assert len(got) >= hb.sent >= 3
    assert to_closed == []  # the closed widget got none
