"""Undoing a notebook tool's cell effect in the saved `.ipynb` (the fallback where no live
document is at hand): the file is read as JSON, the cell found by id, and the notebook written
back through a temporary file renamed over it, so a crash leaves the old or the new file.

The saved file is otherwise read-only to flue_nb (writing it under an open editor fights the
editor): an undo writes it only because the person asked for it, and an editor that has the
notebook open must reload it (JupyterLab: File > Reload Notebook from Disk) to see the result.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from flue_nb.runtime.effects import CellEffect

__all__ = ["SavedCells"]


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

    def apply(self, effect: CellEffect) -> None:
        """Undo one cell effect in the saved file (idempotent: done twice, it is done once)."""
        loaded = self._load(effect)
        if loaded is None:
            raise OSError(f"the saved notebook {effect.notebook!r} cannot be read")
        path, nb = loaded
        cells: list[dict[str, Any]] = nb.setdefault("cells", [])
        cell = _find(nb, effect.cell_id)
        if effect.action == "edited" and cell is not None and effect.source_before is not None:
            cell["source"] = effect.source_before
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
            return
        _atomic_json(path, nb)


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
