"""The chat widget's browser messages are checked (issue 20.7): `approve` takes only a real
boolean, `send` only a string, and anything malformed is ignored without a traceback."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from test_widget import _session, _tool, _until

from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.notebook.chat.widget import ChatWidget

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
