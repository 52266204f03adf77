"""A cell the agent changed is undone where it lives now (issue 34.2): in the live document when
the kernel has one and the record names it (every view sees the old source at once), else in the
saved file. The live document here is an in-memory `Document`; the real ones are tested against
a Jupyter server with collaboration (test_live_document) and in a browser (test_changes_browser)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from flue_nb.notebook.document.protocol import DocumentError, NotebookCell
from flue_nb.notebook.document.undo_cells import DocumentCells
from flue_nb.runtime.effects import CellEffect, Effects
from flue_nb.runtime.messages import ToolResultMessage, message_to_dict
from flue_nb.runtime.store.sqlite import SQLiteStore
from flue_nb.runtime.undo import changes, undo, use_cells


class Tab:
    """An open tab's document: cells by id, and each call it was asked to make."""

    live = True
    via = "front end"

    def __init__(self, cells: list[tuple[str, str]], path: str = "n.ipynb") -> None:
        self.path = path
        self.cells_ = [NotebookCell(i, "code", s) for i, s in cells]
        self.calls: list[tuple[Any, ...]] = []
        self.metadata: dict[str, Any] = {}
        self.answering = True

    def _check(self) -> None:
        if not self.answering:
            raise DocumentError("no tab has the notebook open")

    async def cells(self) -> list[NotebookCell]:
        self._check()
        return list(self.cells_)

    async def edit_cell(self, cell_id: str, source: str, *, metadata: Any = None, expected: Any = None) -> str:
        self._check()
        self.calls.append(("edit", cell_id, source))
        self.metadata[cell_id] = metadata
        i = next(n for n, c in enumerate(self.cells_) if c.id == cell_id)
        old = self.cells_[i].source
        self.cells_[i] = NotebookCell(cell_id, "code", source)
        return old

    async def insert_cell(
        self, source: str, *, kind: str = "code", after: str | None = None, metadata: Any = None
    ) -> str:
        self._check()
        self.calls.append(("insert", source, after))
        at = len(self.cells_) if after is None else next(n for n, c in enumerate(self.cells_) if c.id == after) + 1
        self.cells_.insert(at, NotebookCell(f"new{len(self.calls)}", "code", source))
        return f"new{len(self.calls)}"

    async def delete_cell(self, cell_id: str, *, expected: str) -> tuple[int, dict[str, Any]]:
        self._check()
        self.calls.append(("delete", cell_id))
        i = next(n for n, c in enumerate(self.cells_) if c.id == cell_id)
        del self.cells_[i]
        return i, {}

    async def move_cell(self, cell_id: str, *, after: str | None) -> tuple[int, int]:
        self._check()
        self.calls.append(("move", cell_id, after))
        i = next(n for n, c in enumerate(self.cells_) if c.id == cell_id)
        cell = self.cells_.pop(i)
        self.cells_.insert(0, cell)
        return i, 0

    def sources(self) -> list[str]:
        return [c.source for c in self.cells_]


class Room:
    """A live document that reads and edits, and cannot delete or move cells (as the collaboration
    path was before it could: a document's capabilities are looked up, not assumed)."""

    live = True
    path = "n.ipynb"

    def __init__(self, cells: list[tuple[str, str]]) -> None:
        self.tab = Tab(cells)
        self.cells = self.tab.cells
        self.edit_cell = self.tab.edit_cell
        self.insert_cell = self.tab.insert_cell

    def sources(self) -> list[str]:
        return self.tab.sources()


def _store(tmp_path: Path, *effects: CellEffect) -> SQLiteStore:
    store = SQLiteStore(str(tmp_path / "s.sqlite"))
    store.admit("c", "go", submission_id="s1", now=time.time())
    for n, e in enumerate(effects):
        msg = ToolResultMessage(f"k{n}", "edit_cell", "done", details={"effects": Effects(cells=(e,)).to_dict()})
        store.append("c", "s1", [("message", message_to_dict(msg))], now=time.time())
    return store


@pytest.fixture
def tab_cells():
    def use(doc: Any, saved: str | None = None) -> DocumentCells:
        target = DocumentCells(saved, {}, find=lambda ns: doc)
        use_cells(target)
        return target

    yield use
    use_cells(None)


def test_an_edit_an_insert_and_a_delete_are_undone_in_the_live_document(tmp_path, tab_cells) -> None:
    tab = Tab([("a", "x = 1"), ("b", "y = 20  # agent"), ("new", "z = 3")])
    tab_cells(tab)
    store = _store(
        tmp_path,
        CellEffect("deleted", "gone", "n.ipynb", "code", index_before=0, source_before="w = 0"),
        CellEffect("edited", "b", "n.ipynb", source_before="y = 2", source_after="y = 20  # agent"),
        CellEffect("inserted", "new", "n.ipynb", "code", source_after="z = 3", index_after=2),
    )
    result = undo(store, "c", changes(store, "c", "s1"))
    assert result.done and len(result.undone) == 3, result.text()
    assert set(result.where.values()) == {"in your open tab"}
    assert tab.sources() == ["w = 0", "x = 1", "y = 2"]  # the deleted cell is back at the top
    assert [c[0] for c in tab.calls] == ["delete", "edit", "insert", "move"]
    assert tab.metadata["b"] == {"flue": None}  # the agent's record and label go: the cell is the user's again


def test_a_cell_the_user_typed_in_since_is_not_undone(tmp_path, tab_cells) -> None:
    tab = Tab([("b", "y = 20  # agent, then the user")])
    tab_cells(tab)
    store = _store(
        tmp_path, CellEffect("edited", "b", "n.ipynb", source_before="y = 2", source_after="y = 20  # agent")
    )
    result = undo(store, "c", changes(store, "c", "s1"))
    assert not result.done and [why for _, why in result.refused] == ["changed again since"]
    assert tab.calls == [] and tab.sources() == ["y = 20  # agent, then the user"]


def test_an_insert_in_a_document_that_cannot_delete_cannot_be_undone_and_says_why(tmp_path, tab_cells) -> None:
    room = Room([("new", "z = 3")])
    tab_cells(room)
    store = _store(tmp_path, CellEffect("inserted", "new", "n.ipynb", "code", source_after="z = 3"))
    result = undo(store, "c", changes(store, "c", "s1"))
    assert not result.done and "cannot delete cells" in result.refused[0][1]
    assert room.sources() == ["z = 3"]


def test_a_tab_that_cannot_be_read_refuses_and_one_that_stops_answering_stops_the_undo(tmp_path, tab_cells) -> None:
    tab = Tab([("b", "y = 20")])
    tab_cells(tab)
    store = _store(tmp_path, CellEffect("edited", "b", "n.ipynb", source_before="y = 2", source_after="y = 20"))
    tab.answering = False
    result = undo(store, "c", changes(store, "c", "s1"))
    assert not result.done and result.refused[0][1].startswith("cannot be checked now: the notebook could not be read")
    tab.answering = True
    tab.edit_cell = _no_answer  # type: ignore[method-assign]
    result = undo(store, "c", changes(store, "c", "s1"))
    assert result.done and not result.undone, result.text()
    assert result.failed[0][1] == "DocumentError: the tab did not answer in 10 s"
    assert "Stopped; not undone:" in result.text() and tab.sources() == ["y = 20"]
    assert not changes(store, "c", "s1")[0].undone  # it can be asked again


async def _no_answer(cell_id: str, source: str, **kw: Any) -> str:
    raise DocumentError("the tab did not answer in 10 s")


def test_a_record_of_another_notebook_is_undone_in_its_saved_file(tmp_path, tab_cells) -> None:
    other = tmp_path / "other.ipynb"
    agent = {"flue": {"conversation": "c", "submission": "s1", "tool_call_id": "k0"}, "tags": ["mine"]}
    cell = {
        "cell_type": "code",
        "id": "c1",
        "metadata": agent,
        "source": "x = 2",
        "outputs": [],
        "execution_count": None,
    }
    other.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    tab = Tab([("c1", "x = 2")])
    tab_cells(tab)
    store = _store(tmp_path, CellEffect("edited", "c1", str(other), source_before="x = 1", source_after="x = 2"))
    result = undo(store, "c", changes(store, "c", "s1"))
    assert result.done, result.text()
    [restored] = json.loads(other.read_text())["cells"]
    assert restored["source"] == "x = 1" and restored["metadata"] == {"tags": ["mine"]}
    assert tab.calls == [] and tab.sources() == ["x = 2"]
