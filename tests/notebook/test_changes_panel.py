"""The changes panel of a settled run (issue 34.2), driven through the chat widget's browser
messages without a browser: what it lists, Undo of one item, a refused undo and its force."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_widget import _until

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.notebook.kernel.approve import notebook_approver
from flue_nb.notebook.views.chat.widget import ChatWidget
from flue_nb.runtime import undo

pytest.importorskip("anywidget")


def _session(tmp_path: Path, model: Any, ns: dict[str, Any]) -> Any:
    sandbox = flue.kernel(tmp_path, namespace=ns, approver=notebook_approver)  # type: ignore[arg-type]

    @flue.agent
    def helper() -> str:
        flue.use_model(model)
        flue.use_sandbox(sandbox)
        return "Be brief."

    return flue.init(helper, conversation="panel", db=str(tmp_path / "flue.sqlite"))


def browser(w: ChatWidget, content: Any) -> None:
    """Deliver `content` as the frontend's `model.send(...)` arrives."""
    w._handle_custom_msg(content, [])


@pytest.fixture
def run(tmp_path: Path) -> Any:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    ns: dict[str, Any] = {"rows": [1, 2, 3, 4]}
    model = ScriptedModel([
        reply("", tool_call("edit", "e1", path="notes.txt", old_text="beta", new_text="gamma")),
        reply("", tool_call("python", "p1", code="rows = [r for r in rows if r > 2]")),
        reply("done"),
    ])  # fmt: skip
    session = _session(tmp_path, model, ns)
    undo.use_namespace(lambda: ns)
    w = ChatWidget(session)
    try:
        receipt = w.send_message("tidy up")
        session.read(receipt)
        _until(lambda: receipt.submission_id in w.changes)
        yield w, receipt.submission_id, ns, tmp_path
    finally:
        w.close()
        undo.use_namespace(None)


def test_a_run_that_changed_a_file_and_a_variable_ends_with_a_panel_listing_both(run: Any) -> None:
    w, sid, _ns, _ = run
    panel = w.changes[sid]
    assert panel["headline"] == "2 changes: 1 file, 1 variable"
    by_kind = {i["kind"]: i for i in panel["items"]}
    assert by_kind["file"]["target"] == "notes.txt" or by_kind["file"]["target"].endswith("notes.txt")
    assert by_kind["file"]["diff"][-2:] == ["-beta", "+gamma"]
    assert "(+1 −1 lines)" in by_kind["file"]["summary"]
    assert by_kind["variable"]["summary"] == "rows: list len 4 → len 2"
    assert [i["key"] for i in panel["items"]] == ["1.1", "2.1"]
    assert not any(i["undone"] or i["kept"] for i in panel["items"])
    # The edit's card offers to rewind to before its step; the answer's text part does not.
    card = next(p for b in w.history for p in b["parts"] if p.get("call_id") == "e1")
    assert card["effects"] == 1
    # A chat opened later on the conversation reads the same panel from the store.
    again = ChatWidget(w.session, follow=False)
    try:
        assert again.changes[sid]["items"] == panel["items"]
    finally:
        again.close()


class _Copy:
    """A chat's static copy, counting its rewrites."""

    def __init__(self) -> None:
        self.refreshed = 0

    def refresh(self) -> None:
        self.refreshed += 1


def test_undo_of_one_item_restores_it_and_the_panel_says_so(run: Any) -> None:
    w, sid, ns, tmp_path = run
    w.saved = copy = _Copy()
    browser(w, {"type": "undo", "submission_id": sid, "items": ["1.1"], "force": False})
    assert copy.refreshed == 1  # a notebook saved now has the undo in its static copy
    assert (tmp_path / "notes.txt").read_text() == "alpha\nbeta\n"
    assert ns["rows"] == [3, 4]  # the other item is left as it is
    panel = w.changes[sid]
    assert [i["undone"] for i in panel["items"]] == [True, False]
    assert panel["said"].startswith("Undone 1 item:") and "notes.txt" in panel["said"]
    assert panel["offer"] is None
    browser(w, {"type": "keep", "submission_id": sid, "items": ["all"]})
    assert [i["kept"] for i in w.changes[sid]["items"]] == [True, True]


def test_a_refused_undo_shows_why_changes_nothing_and_undo_anyway_forces_it(run: Any) -> None:
    w, sid, ns, tmp_path = run
    (tmp_path / "notes.txt").write_text("alpha\nedited by hand\n")  # changed again since the run
    browser(w, {"type": "undo", "submission_id": sid, "items": ["all"], "force": False})
    panel = w.changes[sid]
    assert panel["said"].startswith("Nothing was changed")
    assert any("notes.txt" in r and "changed again since" in r for r in panel["refused"])
    assert panel["offer"] == {"what": "undo", "items": ["all"]}
    assert ns["rows"] == [3, 4] and (tmp_path / "notes.txt").read_text() == "alpha\nedited by hand\n"
    browser(w, {"type": "undo", "submission_id": sid, **panel["offer"], "force": True})
    assert ns["rows"] == [1, 2, 3, 4]
    assert (tmp_path / "notes.txt").read_text() == "alpha\nbeta\n"
    assert all(i["undone"] for i in w.changes[sid]["items"])


def test_rewind_from_a_tool_card_undoes_that_step_and_the_later_ones(run: Any) -> None:
    w, sid, ns, tmp_path = run
    browser(w, {"type": "rewind", "submission_id": sid, "call_id": "p1", "force": False})
    assert ns["rows"] == [1, 2, 3, 4]
    assert (tmp_path / "notes.txt").read_text() == "alpha\ngamma\n"  # step 1 is before the rewind point
    assert [i["undone"] for i in w.changes[sid]["items"]] == [False, True]
    for bad in (
        {"type": "undo", "submission_id": sid, "items": "all", "force": False},  # not a list
        {"type": "undo", "submission_id": sid, "items": ["all"], "force": "yes"},
        {"type": "rewind", "submission_id": 3, "call_id": "e1", "force": False},
    ):
        browser(w, bad)
    assert (tmp_path / "notes.txt").read_text() == "alpha\ngamma\n"


def test_a_cell_view_ends_with_the_panel_as_text_and_static_html_naming_the_magics(tmp_path: Path) -> None:
    from flue_nb.notebook.magics.run import CellRun
    from flue_nb.notebook.views.static import StaticView

    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    ns: dict[str, Any] = {"rows": [1, 2, 3, 4]}
    model = ScriptedModel([
        reply("", tool_call("edit", "e1", path="notes.txt", old_text="beta", new_text="<gamma>")),
        reply("", tool_call("python", "p1", code="rows = [r for r in rows if r > 2]")),
        reply("done"),
    ])  # fmt: skip
    session = _session(tmp_path, model, ns)
    run = CellRun(session, "tidy up", agent="helper", model="", background=False, stream=False)
    run.run()
    plain = run.view.text_plain()
    assert plain.endswith("[✓ completed]")
    assert "Δ 2 changes: 1 file, 1 variable\n" in plain
    assert "  2.1 python: rows: list len 4 → len 2\n" in plain
    assert "\n  undo: %flue undo 1.1 · %flue undo all · %flue rewind 1 (to before a step)\n" in plain
    bundle, _meta = StaticView(run.view)._repr_mimebundle_()
    page = bundle["text/html"]
    assert '<details class="flue-changes"><summary>Δ 2 changes: 1 file, 1 variable — review</summary>' in page
    assert '<span class="flue-add">+&lt;gamma&gt;</span>' in page  # escaped: the model's text is not HTML
    assert "<button" not in page  # a static copy: the magics undo, not buttons
    assert "%flue undo all" in bundle["text/markdown"]


def test_the_chats_saved_copy_keeps_each_runs_panel_with_what_was_undone(run: Any) -> None:
    from flue_nb.notebook.views.chat.saved_copy import with_changes
    from flue_nb.notebook.views.history import history_view
    from flue_nb.notebook.views.static import StaticView

    w, sid, _ns, _ = run
    browser(w, {"type": "undo", "submission_id": sid, "items": ["2.1"], "force": False})
    view = history_view("panel", w.session.history(), embed=False)
    with_changes(view, w)
    bundle, _meta = StaticView(view)._repr_mimebundle_()
    assert "Δ “tidy up”: 2 changes: 1 file, 1 variable" in bundle["text/plain"]
    assert "2.1 python: rows: list len 4 → len 2 [undone]" in bundle["text/plain"]
    assert "Δ “tidy up”: 2 changes: 1 file, 1 variable — review</summary>" in bundle["text/html"]
    assert '<span class="flue-del">-beta</span>' in bundle["text/html"]


def test_a_cells_notebook_is_named_as_the_undo_line_names_it(tmp_path: Path) -> None:
    import time

    from flue_nb.notebook.views.changes import panel
    from flue_nb.runtime.effects import CellEffect, Effects
    from flue_nb.runtime.messages import ToolResultMessage, message_to_dict
    from flue_nb.runtime.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "s.sqlite"))
    store.admit("c", "go", submission_id="s1", now=time.time())
    live = CellEffect("edited", "a", "seven/review.ipynb", source_before="x = 1", source_after="x = 2")
    saved = CellEffect("inserted", "b", str(tmp_path / "nb" / "saved.ipynb"), "code", source_after="y = 1")
    for n, e in enumerate((live, saved)):
        msg = ToolResultMessage(f"k{n}", "edit_cell", "done", details={"effects": Effects(cells=(e,)).to_dict()})
        store.append("c", "s1", [("message", message_to_dict(msg))], now=time.time())
    changed = undo.changes(store, "c", "s1")
    items = panel(store, changed, cwd=str(tmp_path))
    assert [i.summary.split(" (")[0] for i in items] == ["edited in seven/review.ipynb", "inserted in nb/saved.ipynb"]
    assert changed[0].describe().endswith("cell a edited in seven/review.ipynb")  # the same words
