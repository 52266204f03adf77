"""Colab's notebook, read-only: Colab keeps no `.ipynb` beside the kernel, but its front end
answers a `get_ipynb` request with the notebook as it stands (`google.colab._message`).

Only tried when `google.colab` is already imported (a Colab kernel); the request runs where the
notebook tools run user code (the kernel's main thread while a cell waits), bounded by a timeout.
Edits are refused: Colab offers no way for the kernel to change the document.
"""

from __future__ import annotations

import sys
from typing import Any

from flue_nb.notebook.document.protocol import DocumentError, NotebookCell, ReadOnlyDocument
from flue_nb.notebook.document.runner import Runner

__all__ = ["ColabDocument", "colab_document"]

TIMEOUT = 5.0
"""Seconds the front end has to answer."""
_READ_ONLY = "Colab's notebook can be read from the kernel but not edited"


class ColabDocument(ReadOnlyDocument):
    """The notebook Colab's front end shows, fetched at each read."""

    read_only_reason = _READ_ONLY

    live = False
    path: str | None = None

    def __init__(self, runner: Runner) -> None:
        self._runner = runner

    async def cells(self) -> list[NotebookCell]:
        """The cells in document order, as the front end has them now."""

        def ask() -> Any:
            from google.colab import _message

            return _message.blocking_request("get_ipynb", request="", timeout_sec=TIMEOUT)

        try:
            reply = await self._runner(ask)
        except Exception as exc:  # noqa: BLE001 - any failure of the front end is one note
            raise DocumentError(f"Colab's front end did not give the notebook ({type(exc).__name__}: {exc})") from None
        nb = reply.get("ipynb") if isinstance(reply, dict) else None
        if not isinstance(nb, dict):
            raise DocumentError(f"Colab's front end did not answer with the notebook within {TIMEOUT:g} s")
        return [_cell(i, c) for i, c in enumerate(nb.get("cells", [])) if isinstance(c, dict)]


def _cell(index: int, raw: dict[str, Any]) -> NotebookCell:
    source = raw.get("source", "")
    kind = raw.get("cell_type", "code")
    found = raw.get("metadata")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    return NotebookCell(
        id=str(raw.get("id") or meta.get("id") or f"index-{index}"),  # Colab keeps its id in metadata
        kind=kind if kind in ("code", "markdown", "raw") else "raw",
        source="".join(source) if isinstance(source, list) else str(source),
        execution_count=raw.get("execution_count"),
        outputs=tuple(o for o in raw.get("outputs", ()) if isinstance(o, dict)),
        metadata=meta,
    )


def colab_document(runner: Runner | None) -> ColabDocument | None:
    """A `ColabDocument` in a Colab kernel (with a runner to ask from), else None."""
    if runner is None or "google.colab" not in sys.modules:
        return None
    return ColabDocument(runner)
