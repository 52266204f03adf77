"""Undoing a notebook tool's cell effect where the cell lives now (issue 34.2).

`DocumentCells` restores it in the live document when this kernel has one and the record names
it: through real-time collaboration, or the open tab through flue_nb's extension (every view sees
the old source at once, and the editor saves it as any edit). Without a live document it falls
back to `SavedCells`, the saved `.ipynb`: the file is read as JSON, the cell found by id, and the
notebook written back through a temporary file renamed over it, so a crash leaves the old or the
new file.

The saved file is otherwise read-only to flue_nb (writing it under an open editor fights the
editor): the fallback writes it only because the person asked for it, and an editor that has the
notebook open must reload it (JupyterLab: File > Reload Notebook from Disk) to see the result.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, TypeVar

from flue_nb.notebook.document.protocol import Document, DocumentError
from flue_nb.runtime.effects import CellEffect

__all__ = ["DocumentCells", "SavedCells"]

T = TypeVar("T")


class SavedCells:
    """Reads and restores cells of saved notebooks (`flue_nb.runtime.undo.use_cells`)."""

    def __init__(self, default_path: str | None = None) -> None:
        self.default_path = default_path
        """The notebook of this kernel, for a record whose path is relative to a server's root."""

    def _path(self, effect: CellEffect) -> str | None:
        path = effect.notebook
        if path and os.path.isabs(path):
            return path
        if self.default_path and (not path or self.default_path.endswith(path)):
            return self.default_path
        return path

    def _load(self, effect: CellEffect) -> tuple[str, dict[str, Any]] | None:
        path = self._path(effect)
        if not path:
            return None
        try:
            with open(path, encoding="utf-8") as f:
                return path, json.load(f)
        except (OSError, ValueError):
            return None

    def source(self, effect: CellEffect) -> Any:
        """The cell's source in the saved file now (None when the cell is not there; `...` when
        the notebook cannot be read)."""
        loaded = self._load(effect)
        if loaded is None:
            return ...
        cell = _find(loaded[1], effect.cell_id)
        return _text(cell.get("source", "")) if cell is not None else None

    def apply(self, effect: CellEffect) -> str | None:
        """Undo one cell effect in the saved file (idempotent: done twice, it is done once);
        where, as a person reads it."""
        loaded = self._load(effect)
        if loaded is None:
            raise OSError(f"the saved notebook {effect.notebook!r} cannot be read")
        path, nb = loaded
        cells: list[dict[str, Any]] = nb.setdefault("cells", [])
        cell = _find(nb, effect.cell_id)
        if effect.action == "edited" and cell is not None and effect.source_before is not None:
            cell["source"] = effect.source_before
            # The agent's record of the edit goes with it: the cell is the user's again.
            if isinstance(cell.get("metadata"), dict):
                cell["metadata"].pop("flue", None)
        elif effect.action == "inserted" and cell is not None:
            cells.remove(cell)
        elif effect.action == "deleted" and cell is None and effect.source_before is not None:
            at = effect.index_before if effect.index_before is not None else len(cells)
            kind = effect.cell_type or "code"
            new: dict[str, Any] = {
                "cell_type": kind,
                "id": effect.cell_id,
                "metadata": {},
                "source": effect.source_before,
            }
            if kind == "code":
                new.update(execution_count=None, outputs=[])
            cells.insert(min(at, len(cells)), new)
        else:
            return None
        _atomic_json(path, nb)
        return (
            f"in the saved file {os.path.basename(path)} (no live document: an editor that has it open must "
            "reload it, e.g. JupyterLab's File > Reload Notebook from Disk)"
        )


def _find(nb: dict[str, Any], cell_id: str | None) -> dict[str, Any] | None:
    return next((c for c in nb.get("cells", []) if isinstance(c, dict) and c.get("id") == cell_id), None)


def _text(source: Any) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def _atomic_json(path: str, nb: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".flue-undo-", suffix=".ipynb", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(nb, f, indent=1, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class DocumentCells(SavedCells):
    """Reads and restores cells in the live document when there is one and the record names it
    (the notebook the agent edited live), else in the saved file (`SavedCells`)."""

    def __init__(
        self,
        default_path: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        *,
        find: Callable[[Mapping[str, Any] | None], Document | None] | None = None,
    ) -> None:
        super().__init__(default_path)
        self._namespace = namespace
        self._find = find or _find_live

    def _live(self, effect: CellEffect) -> Document | None:
        doc = self._find(self._namespace)
        if doc is None or not getattr(doc, "live", False):
            return None
        return doc if _names(effect, doc, self.default_path) else None

    def source(self, effect: CellEffect) -> Any:
        """The cell's source in the live document now (None when it is not there; `...` when
        the document cannot be read), or in the saved file without one."""
        doc = self._live(effect)
        if doc is None:
            return super().source(effect)
        try:
            cells = _blocking(doc.cells)
        except DocumentError:
            return ...
        cell = next((c for c in cells if c.id == effect.cell_id), None)
        return cell.source if cell is not None else None

    def why_not(self, effect: CellEffect) -> str | None:
        """Why this document cannot undo `effect` at all (None when it can)."""
        doc = self._live(effect)
        if doc is not None and effect.action == "inserted" and not callable(getattr(doc, "delete_cell", None)):
            return "this live document cannot delete cells: delete the inserted cell by hand"
        return None

    def apply(self, effect: CellEffect) -> str | None:
        """Undo one cell effect in the live document (an edit is set back, an inserted cell
        deleted, a deleted one inserted again at its place), or in the saved file without one;
        where. Raises `DocumentError` when the document did not take it (no tab answered)."""
        doc = self._live(effect)
        if doc is None:
            return super().apply(effect)
        cell_id = effect.cell_id or ""
        if effect.action == "edited" and effect.source_before is not None:
            _blocking(lambda: doc.edit_cell(cell_id, effect.source_before or "", metadata={"flue": None}))
        elif effect.action == "inserted":
            cells = _blocking(doc.cells)
            current = next((c for c in cells if c.id == cell_id), None)
            if current is not None:  # gone already: done (a recovery may apply it twice)
                _blocking(lambda: doc.delete_cell(cell_id, expected=current.source))
        elif effect.action == "deleted" and effect.source_before is not None:
            self._insert_again(doc, effect)
        else:
            return None
        if getattr(doc, "via", None) == "front end":
            return "in your open tab"
        return "in the live (collaborative) notebook"

    def _insert_again(self, doc: Document, effect: CellEffect) -> None:
        cells = _blocking(doc.cells)
        if any(c.id == effect.cell_id for c in cells):
            return
        at = effect.index_before if effect.index_before is not None else len(cells)
        after = cells[at - 1].id if 0 < at <= len(cells) else None
        kind: Literal["code", "markdown"] = "markdown" if effect.cell_type == "markdown" else "code"
        new_id = _blocking(lambda: doc.insert_cell(effect.source_before or "", kind=kind, after=after))
        if at == 0 and cells and callable(getattr(doc, "move_cell", None)):  # `after=None` inserts at the end
            _blocking(lambda: doc.move_cell(new_id, after=None))


def _names(effect: CellEffect, doc: Document, default_path: str | None) -> bool:
    """Whether the record's notebook is the live document's."""
    recorded = effect.notebook
    if not recorded or not doc.path:
        return not recorded
    if recorded == doc.path:
        return True
    # A record made from the saved file names its absolute path.
    return os.path.isabs(recorded) and recorded == default_path and recorded.endswith(os.sep + doc.path)


def _find_live(namespace: Mapping[str, Any] | None) -> Document | None:
    from flue_nb.notebook.document.saved import find_document

    found = _blocking(lambda: find_document(namespace))
    return found if found is not None and getattr(found, "live", False) else None


def _blocking(make: Callable[[], Awaitable[T]]) -> T:
    """Run a document call to its end from synchronous code, on a thread of its own: the caller
    may be the kernel's main thread, whose event loop is running (a magic, a widget's message).
    Every document call is bounded by its own timeout."""
    box: dict[str, Any] = {}

    async def call() -> T:
        return await make()

    def run() -> None:
        try:
            box["value"] = asyncio.run(call())
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="flue-undo-cells", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
