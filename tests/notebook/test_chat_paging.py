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
from flue_nb.notebook.views.chat.saved_copy import COPY_LAST, SavedCopy
from flue_nb.notebook.views.chat.widget import PAGE, ChatWidget
from flue_nb.runtime.store.sqlite import SQLiteStore
from tests.runtime.test_scale import build, bulk_build

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


def test_scrolling_up_a_long_conversation_page_by_page_shows_every_turn_once_in_order(tmp_path: Path) -> None:
    # Ten full pages and a short one, each asked for by one `older` message, as the browser
    # sends them while the user scrolls up, until the chat says nothing came before.
    n = 10 * PAGE + 7
    session = _session(tmp_path, ScriptedModel([reply("unused")]), cid="long")
    bulk_build(tmp_path / "flue.sqlite", "long", n, t0=1_000.0)
    w = ChatWidget(session, follow=False)
    try:
        asked, shown = 0, _ids(w)
        while w.older:
            before = w.older
            _browser(w, {"type": "older"})
            asked += 1
            now = _ids(w)
            assert now[-len(shown) :] == shown and w.older == before - (len(now) - len(shown)) >= 0
            shown = now
        assert asked == -(-(n - PAGE) // PAGE)
        turns = [b for b in w.history if b["kind"] == "submission"]
        assert [b["id"] for b in turns] == [f"long-{i:05d}" for i in range(n)]  # each once, in order
        assert [b["text"] for b in turns] == [f"read it {i}" for i in range(n)]
        assert [[(p["kind"], p.get("call_id") or p.get("text")) for p in b["parts"]] for b in turns] == [
            [("tool", f"call-long-{i}"), ("text", f"done {i}")] for i in range(n)
        ]
        assert all(b["outcome"] == "completed" for b in turns)
        assert w.history[-1]["kind"] == "aside"  # the compaction after the last turn, once
        assert sum(b["kind"] == "aside" for b in w.history) == 1
    finally:
        w.close()


def test_a_chat_and_its_static_copy_open_on_one_read_of_the_newest_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1,000 submissions and a compaction after them: opening reads the page's records once (the
    # static copy draws from the same read) and nothing from before the page; not each run's
    # changes (none has effects), nor the whole journal for the compaction's aside.
    session = _session(tmp_path, ScriptedModel([reply("unused")]), cid="long")
    bulk_build(tmp_path / "flue.sqlite", "long", 20 * PAGE, t0=1_000.0)
    session.status()  # the gauge's tally folded once before (tests/runtime/test_scale.py keeps it)
    reads: list[tuple[int, dict[str, Any]]] = []
    db = tmp_path / "flue.sqlite"
    records = SQLiteStore.records

    def counting(store: SQLiteStore, cid: str, **kw: Any) -> list[Any]:
        got = records(store, cid, **kw)
        # Only this test's store: a follower an earlier test of this worker closed may still
        # finish a read of its own store meanwhile (seen in a loaded run: reads from seq 5).
        if Path(store.path) == db:
            reads.append((len(got), kw))
        return got

    monkeypatch.setattr(SQLiteStore, "records", counting)
    w = ChatWidget(session, follow=False)
    try:
        page = w.opening_page(COPY_LAST)
        assert page is not None and len(page.submissions) == PAGE
        copy = SavedCopy.__new__(SavedCopy)
        copy.widget = w
        text = copy.view(page)._repr_mimebundle_()[0]["text/plain"]
        assert f"({20 * PAGE - PAGE:,} earlier submissions not shown;" in text and "read it 999" in text
        assert w.opening_page(COPY_LAST) is None  # handed over once
    finally:
        w.close()
    assert [kw for _, kw in reads if kw.get("kinds") is None] == [
        {"after_seq": page.after_seq, "before_seq": None, "kinds": None}
    ]
    assert all(kw.get("submission_id") or kw.get("after_seq", 0) >= page.after_seq for _, kw in reads), reads
    assert sum(n for n, _ in reads) <= 2 * len(page.records)


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
