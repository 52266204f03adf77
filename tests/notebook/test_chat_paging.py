"""A long conversation's chat opens on a page and loses nothing (issue 37): the browser's `older`
message brings every earlier submission back, the static copy and history say what they left out.

No browser: the widget's message handler is driven as the frontend's `model.send` arrives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_widget import _session

from flue_nb import cli
from flue_nb.models import ScriptedModel, reply
from flue_nb.notebook.magics.commands import history_with_outcomes
from flue_nb.notebook.views.chat.saved_copy import SavedCopy
from flue_nb.notebook.views.chat.widget import PAGE, ChatWidget
from tests.runtime.test_scale import build

pytest.importorskip("anywidget")

N = 2 * PAGE + 30


def _browser(w: ChatWidget, content: Any) -> None:
    w._handle_custom_msg(content, [])


def _ids(w: ChatWidget) -> list[str]:
    return [b["id"] for b in w.history if b["kind"] == "submission"]


def _long(tmp_path: Path, cid: str = "long") -> Any:
    session = _session(tmp_path, ScriptedModel([reply("fresh answer")]), cid=cid)
    build(session.store, cid, N, t0=1_000.0)
    return session


def test_the_chat_opens_on_the_newest_page_and_scrolling_up_brings_back_every_turn(tmp_path: Path) -> None:
    session = _long(tmp_path)
    every = [s.id for s in session.submissions()]
    w = ChatWidget(session)
    try:
        assert _ids(w) == every[-PAGE:] and w.older == N - PAGE
        _browser(w, {"type": "older"})
        assert _ids(w) == every[-2 * PAGE :] and w.older == N - 2 * PAGE
        _browser(w, {"type": "older"})
        assert _ids(w) == every and w.older == 0
        _browser(w, {"type": "older"})  # nothing earlier: nothing changes
        assert _ids(w) == every
        first = next(b for b in w.history if b["id"] == every[0])
        assert first["outcome"] == "completed" and [p["kind"] for p in first["parts"]] == ["tool", "text"]
        # A new message lands under every page drawn, once.
        assert session.prompt("one more") == "fresh answer"
        w.flush()
        assert _ids(w) == [*every, session.submissions()[-1].id]
        assert w.history[-1]["parts"][-1]["text"] == "fresh answer"
    finally:
        w.close()


def test_a_redraw_from_the_store_keeps_the_pages_the_browser_asked_for(tmp_path: Path) -> None:
    session = _long(tmp_path)
    w = ChatWidget(session, follow=False)
    try:
        _browser(w, {"type": "older"})
        shown = _ids(w)
        w.redraw_from_store()  # what the follower does when another kernel wrote
        assert _ids(w) == shown and w.older == N - 2 * PAGE
    finally:
        w.close()


def test_the_static_copy_holds_the_newest_page_and_says_what_it_left_out(tmp_path: Path) -> None:
    session = _long(tmp_path, cid="copied")
    w = ChatWidget(session, follow=False)
    try:
        copy = SavedCopy.__new__(SavedCopy)  # its view alone, without a display to write into
        copy.widget = w
        bundle, _ = copy.view()._repr_mimebundle_()
        text = bundle["text/plain"]
        left_out = N - PAGE
        assert f"({left_out:,} earlier submissions not shown;" in text
        assert "`%flue history -c copied --last N`" in text and "`flue-nb history copied --last N`" in text
        assert f"done {N - 1}" in text and f"done {N - PAGE}" in text and f"done {left_out - 1}\n" not in text
    finally:
        w.close()


def test_history_shows_the_last_submissions_and_says_how_to_see_more(tmp_path: Path) -> None:
    session = _long(tmp_path, cid="hist")
    shown = history_with_outcomes(session, last=5).plain
    assert shown.startswith(f"({N - 5:,} earlier submissions not shown; `%flue history --last {N}` shows them all)")
    assert f"done {N - 1}" in shown and f"done {N - 5}" in shown and f"done {N - 6}" not in shown
    everything = history_with_outcomes(session, last=0).plain
    assert "not shown" not in everything and "done 0" in everything
    db = str(tmp_path / "flue.sqlite")
    out = cli.history(db, "hist", last=3)
    assert f"({N - 3:,} earlier submissions not shown; `flue-nb history hist --last {N}` shows them all)" in out
    assert f"{N}. " in out and f"{N - 3}. " not in out and f"done {N - 1}" in out
    default = cli.history(db, "hist")
    assert f"({N - 20:,} earlier submissions not shown;" in default and f"{N - 19}. " in default
