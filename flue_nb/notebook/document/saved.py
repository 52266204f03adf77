"""The notebook this kernel runs, as a document: the live one when a server offers it, else the
saved `.ipynb` read as nbformat reads it (read-only), else none.

Which notebook: jupyter_server gives the kernel its path in `JPY_SESSION_NAME` (a rename after
start is not seen); VS Code puts `__vsc_ipynb_file__` in the namespace. The live document comes
from `flue_nb.notebook.document.live.connect()` (imported only here, when a tool first needs it).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from flue_nb.notebook.document.protocol import Document, DocumentError, NotebookCell, ReadOnlyDocument
from flue_nb.notebook.document.runner import Runner

__all__ = ["SavedDocument", "find_document", "notebook_path", "reset_document"]

LIVE_TIMEOUT = 5.0
"""Seconds `connect()` may take to find a live document."""
_RETRY_LIVE_AFTER = 60.0


_READ_ONLY = (
    "the notebook is known only from its saved file, which is read-only here: writing it would "
    "fight the editor that has it open"
)


class SavedDocument(ReadOnlyDocument):
    """The saved `.ipynb`, read again whenever it changes on disk; it cannot be edited."""

    read_only_reason = _READ_ONLY

    live = False

    def __init__(self, path: str) -> None:
        self.path: str | None = path
        self._cached: tuple[float, list[NotebookCell]] | None = None

    async def cells(self) -> list[NotebookCell]:
        """The saved cells in document order."""
        assert self.path is not None
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError as exc:
            raise DocumentError(f"the saved notebook {self.path!r} cannot be read: {exc}") from None
        if self._cached is not None and self._cached[0] == mtime:
            return self._cached[1]
        cells = _read(self.path)
        self._cached = (mtime, cells)
        return cells


def _read(path: str) -> list[NotebookCell]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        raw = json.loads(text)
    except (OSError, ValueError) as exc:
        raise DocumentError(f"the saved notebook {path!r} is not a readable .ipynb: {exc}") from None
    # A plain v4 notebook is read as nbformat reads it, without nbformat: importing it costs
    # ~1.5 CPU-s where JupyterLab's jsonschema extras are installed (rfc3987-syntax's parsers).
    cells = _plain_v4_cells(raw)
    return cells if cells is not None else _read_with_nbformat(path, text)


def _plain_v4_cells(raw: Any) -> list[NotebookCell] | None:
    """The cells of a v4 notebook as nbformat 5's `read(as_version=4)` gives them, or None where
    nbformat would do more (convert another version, repair missing or repeated cell ids)."""
    if not isinstance(raw, dict) or raw.get("nbformat") != 4 or not isinstance(raw.get("cells"), list):
        return None
    cells = raw["cells"]
    if not all(
        isinstance(c, dict) and isinstance(c.get("metadata", {}), dict) and isinstance(c.get("outputs", []), list)
        for c in cells
    ):
        return None
    if raw.get("nbformat_minor", 0) >= 5:
        ids = [c.get("id") for c in cells]
        if not all(isinstance(i, str) and i for i in ids) or len(set(ids)) != len(ids):
            return None
    out = []
    try:
        for index, cell in enumerate(cells):
            outputs = [_joined_output(o) for o in cell.get("outputs", ()) if isinstance(o, dict)]
            metadata = {k: v for k, v in cell.get("metadata", {}).items() if k != "trusted"}
            source = _joined(cell.get("source", ""))
            out.append(_cell(index, cell.get("cell_type", "code"), cell, source, outputs, metadata))
    except TypeError:  # text that is not text: nbformat says what is wrong
        return None
    return out


def _read_with_nbformat(path: str, text: str) -> list[NotebookCell]:
    import nbformat

    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same note to the model
        raise DocumentError(f"the saved notebook {path!r} is not a readable .ipynb: {exc}") from None
    return [
        _cell(i, c.get("cell_type", "code"), c, c.get("source", ""), c.get("outputs", ()), dict(c.get("metadata", {})))
        for i, c in enumerate(nb.cells)
    ]


def _cell(index: int, kind: Any, cell: Mapping[str, Any], source: Any, outputs: Any, metadata: Any) -> NotebookCell:
    return NotebookCell(
        id=str(cell.get("id") or f"index-{index}"),
        kind=kind if kind in ("code", "markdown", "raw") else "raw",
        source=source,
        execution_count=cell.get("execution_count"),
        outputs=tuple(outputs),
        metadata=metadata,
    )


def _joined(text: Any) -> Any:
    return "".join(text) if isinstance(text, list) else text


def _joined_output(output: dict[str, Any]) -> dict[str, Any]:
    """An output with its text joined as nbformat's `rejoin_lines` does (JSON data left as is)."""
    output = dict(output)
    kind = output.get("output_type", "")
    if kind in ("execute_result", "display_data") and isinstance(output.get("data"), dict):
        output["data"] = {
            mime: "".join(v)
            if not _json_mime(mime) and isinstance(v, list) and all(isinstance(x, str) for x in v)
            else v
            for mime, v in output["data"].items()
        }
    elif kind and isinstance(output.get("text", ""), list):
        output["text"] = "".join(output["text"])
    return output


def _json_mime(mime: str) -> bool:
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def notebook_path(namespace: Mapping[str, Any] | None = None) -> str | None:
    """The saved notebook this kernel runs, when the front end said which (else None)."""
    vsc = (namespace or {}).get("__vsc_ipynb_file__")
    if isinstance(vsc, str) and vsc:
        return vsc
    name = os.environ.get("JPY_SESSION_NAME")
    if not name or not name.endswith(".ipynb"):
        return None
    if os.path.isabs(name):
        return name
    # jupyter_server names it relative to its root, which is the kernel's start directory only
    # when the notebook sits there; try both.
    root = os.environ.get("JPY_SERVER_ROOT") or os.getcwd()
    for base in (root, os.getcwd()):
        candidate = os.path.join(base, name)
        if os.path.exists(candidate):
            return candidate
    return os.path.join(os.getcwd(), os.path.basename(name))


_live: Document | None = None
_live_checked = 0.0


async def find_document(namespace: Mapping[str, Any] | None = None, runner: Runner | None = None) -> Document | None:
    """The live document when a server offers one, else the saved notebook, else (in Colab, with a
    `runner` to ask the front end from) Colab's notebook, else None.

    Live means real-time collaboration when the server has it (every view sees the edit, no tab
    needs to be open), else the tab that has the notebook open, through flue_nb's server
    extension (`frontend.py`): with both available, collaboration is the one chosen."""
    global _live, _live_checked
    path = notebook_path(namespace)
    if _live is None and time.monotonic() - _live_checked > _RETRY_LIVE_AFTER:
        _live_checked = time.monotonic()
        _live = await _connect_live() or await _connect_frontend(path)
    if _live is not None:
        return _live
    if path and os.path.exists(path):
        return SavedDocument(path)
    from flue_nb.notebook.document.colab import colab_document

    return colab_document(runner)


def reset_document() -> None:
    """Forget the live document (it failed): the next look connects again."""
    global _live, _live_checked
    _live, _live_checked = None, 0.0


async def _connect_frontend(saved_path: str | None) -> Document | None:
    try:
        from flue_nb.notebook.document.frontend import connect

        found = await asyncio.to_thread(connect, timeout=LIVE_TIMEOUT, saved_path=saved_path)
    except Exception:  # noqa: BLE001 - "not available" is never an error, whatever went wrong
        return None
    return found if isinstance(found, Document) else None


async def _connect_live() -> Document | None:
    try:
        from flue_nb.notebook.document.live import connect
    except ImportError:
        return None
    try:
        if inspect.iscoroutinefunction(connect):
            found = await connect(timeout=LIVE_TIMEOUT)
        else:  # a blocking look-up must not stall the runtime's loop
            found = await asyncio.to_thread(connect, timeout=LIVE_TIMEOUT)
        if inspect.isawaitable(found):
            found = await found
    except Exception:  # noqa: BLE001 - "not available" is never an error, whatever went wrong
        return None
    return found if isinstance(found, Document) else None
