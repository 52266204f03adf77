"""`FrontEndDocument`: the notebook open in a browser tab, edited through that tab (no collaboration).

The kernel finds its Jupyter server as the live path does (`servers.find`) and posts each operation
to flue_nb's server extension (`frontend_server.py`), which hands it to one tab that has the
notebook open (the `flue-nb` labextension applies it to the tab's notebook model: the user sees it
at once; it reaches the file when the notebook is saved). Every call is bounded; when no tab
answers, reads fall back to the saved file and writes raise `NotReached` saying why, so a tool
never claims an edit that did not happen.
"""

from __future__ import annotations

import asyncio
import os
import urllib.error
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from flue_nb.notebook.document.protocol import CellChanged, DocumentError, NotebookCell
from flue_nb.notebook.document.servers import Found, Unavailable, find, request

__all__ = ["FrontEndDocument", "NotReached", "connect"]

TIMEOUT = 10.0
"""Seconds the tab may take to apply one operation (the server's probe adds at most 3.4 s)."""
_SLACK = 5.0


class NotReached(DocumentError):
    """No tab applied the operation: none is connected, none has the notebook open, or it did not answer."""

    def __init__(self, message: str, reach: str) -> None:
        super().__init__(message)
        self.reach = reach
        """`no_front_end`, `not_open`, `no_answer`, `no_extension` or `failed`."""


class FrontEndDocument:
    """The `Document` of the notebook open in a tab of JupyterLab 4 or Notebook 7."""

    live = True
    via = "front end"

    def __init__(self, found: Found, *, timeout: float = TIMEOUT, saved_path: str | None = None) -> None:
        self.path: str | None = found.path
        self.timeout = timeout
        self._found = found
        self._saved_path = saved_path
        self.last_reach: str | None = None
        """Why the last operation reached no tab (None when one answered)."""
        self.tabs = 0
        """How many tabs had the notebook open at the last operation."""

    def __repr__(self) -> str:
        return f"FrontEndDocument({self.path!r} on {self._found.server.url})"

    async def _op(self, op: str, args: Mapping[str, Any]) -> dict[str, Any]:
        body = {"path": self.path, "op": op, "args": dict(args), "timeout": self.timeout}
        try:
            reply = await asyncio.to_thread(
                request, self._found.server, "POST", "flue-nb/frontend", body=body, timeout=self.timeout + _SLACK
            )
        except urllib.error.HTTPError as exc:
            code = "no_extension" if exc.code == 404 else "failed"
            why = "flue_nb's server extension is not loaded there" if exc.code == 404 else f"HTTP {exc.code}"
            raise NotReached(f"the Jupyter server at {self._found.server.url} answered {why}", code) from None
        except (OSError, ValueError) as exc:
            raise NotReached(f"the Jupyter server did not answer ({type(exc).__name__}: {exc})", "failed") from None
        if not isinstance(reply, dict):
            raise NotReached(f"the server's answer was not understood: {reply!r:.200}", "failed")
        reach = reply.get("reach")
        if isinstance(reach, str):
            self.last_reach = reach
            raise NotReached(str(reply.get("error") or reach), reach)
        self.last_reach = None
        self.tabs = int(reply.get("tabs") or 0)
        if reply.get("changed"):
            raise CellChanged(str(args.get("id")), str(reply.get("current", "")))
        if reply.get("closed"):
            raise NotReached(str(reply.get("error")), "not_open")
        if reply.get("expired"):  # the tab got it too late to act: nothing was changed
            raise NotReached(str(reply.get("error")), "no_answer")
        if not reply.get("ok"):
            raise DocumentError(f"the tab could not do it: {reply.get('error') or reply}")
        return reply

    async def cells(self) -> list[NotebookCell]:
        """The cells as the open tab holds them now (its unsaved typing included); the saved file
        when no tab answers."""
        try:
            reply = await self._op("cells", {})
        except NotReached:
            if self._saved_path and os.path.exists(self._saved_path):
                from flue_nb.notebook.document.saved import SavedDocument

                return await SavedDocument(self._saved_path).cells()
            raise
        return [_cell(c, i) for i, c in enumerate(reply.get("cells") or []) if isinstance(c, dict)]

    async def insert_cell(
        self,
        source: str,
        *,
        kind: Literal["code", "markdown"] = "code",
        after: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Insert a cell after `after` (None: at the end) in the open tab; its id."""
        reply = await self._op(
            "insert", {"source": source, "kind": kind, "after": after, "metadata": dict(metadata or {})}
        )
        return str(reply["id"])

    async def edit_cell(
        self, cell_id: str, source: str, *, metadata: Mapping[str, Any] | None = None, expected: str | None = None
    ) -> str:
        """Replace a cell's source in the open tab (compare-and-set when `expected` is given); the old source."""
        current = expected
        if current is None:
            current = next((c.source for c in await self.cells() if c.id == cell_id), None)
            if current is None:
                raise DocumentError(f"the notebook has no cell with id {cell_id!r}; call `cells` to see the ids")
        flue = (metadata or {}).get("flue")
        # `{"flue": None}` (an undo): the tab drops the agent's record and its label from the cell.
        undone = metadata is not None and "flue" in metadata and flue is None
        reply = await self._op(
            "edit", {"id": cell_id, "source": source, "expected": current, "flue": flue, "undone": undone}
        )
        return str(reply.get("old", current))

    async def delete_cell(self, cell_id: str, *, expected: str) -> tuple[int, dict[str, Any]]:
        """Delete a cell that still holds `expected`; its index and nbformat JSON."""
        reply = await self._op("delete", {"id": cell_id, "expected": expected})
        return int(reply["index"]), dict(reply.get("cell") or {})

    async def move_cell(self, cell_id: str, *, after: str | None) -> tuple[int, int]:
        """Move a cell below `after` (None: to the top); its old and new index."""
        reply = await self._op("move", {"id": cell_id, "after": after})
        return int(reply["from"]), int(reply["index"])

    async def write_outputs(
        self, cell_id: str, outputs: Sequence[Mapping[str, Any]], execution_count: int | None
    ) -> None:
        """Set a code cell's outputs and execution count in the open tab."""
        await self._op(
            "outputs", {"id": cell_id, "outputs": [dict(o) for o in outputs], "execution_count": execution_count}
        )

    async def close(self) -> None:
        """Nothing held open between calls."""


def _cell(raw: Mapping[str, Any], index: int) -> NotebookCell:
    kind = raw.get("cell_type")
    source = raw.get("source", "")
    count = raw.get("execution_count")
    return NotebookCell(
        id=str(raw.get("id") or f"index-{index}"),
        kind=kind if kind in ("code", "markdown", "raw") else "raw",
        source=source if isinstance(source, str) else "".join(source),
        execution_count=int(count) if isinstance(count, (int, float)) else None,
        outputs=tuple(o for o in raw.get("outputs") or () if isinstance(o, dict)),
        metadata=dict(raw.get("metadata") or {}),
    )


def connect(*, timeout: float = 5.0, saved_path: str | None = None) -> FrontEndDocument | None:
    """The front-end document of this kernel's notebook when its server runs flue_nb's extension
    (None otherwise: no server, or the extension is not loaded there)."""
    try:
        found = find(timeout=timeout)
    except Unavailable:
        return None
    try:
        request(found.server, "POST", "flue-nb/frontend", body={"path": found.path, "op": "ping"}, timeout=timeout)
    except (OSError, ValueError):  # HTTP 404: the server does not run flue_nb's extension
        return None
    return FrontEndDocument(found, saved_path=saved_path)
