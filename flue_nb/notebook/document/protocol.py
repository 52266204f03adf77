"""The Document protocol: the notebook's cells as a store the notebook tools read and write.

`cells` reads it and falls back to a read-only saved copy; `live_document` implements it on a
Jupyter server's real-time collaboration (`flue_nb.notebook.document.live.connect()`), `frontend`
through a tab that has the notebook open (no collaboration).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["CellChanged", "CellKind", "Document", "DocumentError", "NotebookCell", "ReadOnlyDocument"]

CellKind = Literal["code", "markdown", "raw"]


class DocumentError(Exception):
    """A document operation that could not be done; its message is written for the model."""


class CellChanged(DocumentError):
    """A write refused because the cell no longer holds the source the agent last read."""

    def __init__(self, cell_id: str, current: str) -> None:
        super().__init__(f"cell {cell_id!r} changed since the agent read it")
        self.cell_id = cell_id
        self.current = current
        """The cell's source now (the user's work, kept as it is)."""


@dataclass(frozen=True)
class NotebookCell:
    """One cell of the document, as it stands now."""

    id: str
    """The document's cell id (nbformat 4.5 `id`)."""
    kind: CellKind
    source: str
    execution_count: int | None = None
    outputs: tuple[Mapping[str, Any], ...] = ()
    """nbformat v4 output dicts."""
    metadata: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Document(Protocol):
    """A notebook document the tools can read and, when it allows, edit.

    Methods raise `DocumentError` (no such cell, the server went away, a timeout) and never hang:
    every network step has a bounded timeout. `metadata` given to `insert_cell`/`edit_cell` is
    merged into the cell's metadata (the tools pass `{"flue": {conversation, submission,
    tool_call_id}}`); a key given as None is removed (an undo passes `{"flue": None}`: the cell is
    the user's again).
    """

    path: str | None
    """The notebook's path as the server (or the file system) names it."""
    live: bool
    """True when an edit appears at once in every open view of the document."""

    async def cells(self) -> list[NotebookCell]:
        """The cells in document order."""
        ...

    async def insert_cell(
        self,
        source: str,
        *,
        kind: Literal["code", "markdown"] = "code",
        after: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Insert a cell after the cell `after` (None: at the end); returns the new cell's id."""
        ...

    async def edit_cell(
        self, cell_id: str, source: str, *, metadata: Mapping[str, Any] | None = None, expected: str | None = None
    ) -> str:
        """Replace a cell's source; returns the old source. With `expected`, a compare-and-set:
        raises `CellChanged` (nothing written) unless the cell holds exactly `expected`."""
        ...

    async def delete_cell(self, cell_id: str, *, expected: str) -> tuple[int, dict[str, Any]]:
        """Delete a cell, a compare-and-set as `edit_cell`'s (`CellChanged` unless it holds exactly
        `expected`); its index and nbformat JSON."""
        ...

    async def move_cell(self, cell_id: str, *, after: str | None) -> tuple[int, int]:
        """Move a cell below the cell `after` (None: to the top); its old and new index."""
        ...

    async def write_outputs(
        self, cell_id: str, outputs: Sequence[Mapping[str, Any]], execution_count: int | None
    ) -> None:
        """Set a code cell's outputs and execution count."""
        ...

    async def close(self) -> None:
        """Release the connection (idempotent)."""
        ...


class ReadOnlyDocument:
    """The writing half of `Document` for documents flue_nb can only read: every write refused."""

    read_only_reason = "this notebook can be read but not edited"
    """The `DocumentError` message every write gets (written for the model)."""

    async def insert_cell(
        self,
        source: str,
        *,
        kind: Literal["code", "markdown"] = "code",
        after: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Always refused."""
        raise DocumentError(self.read_only_reason)

    async def edit_cell(
        self, cell_id: str, source: str, *, metadata: Mapping[str, Any] | None = None, expected: str | None = None
    ) -> str:
        """Always refused."""
        raise DocumentError(self.read_only_reason)

    async def delete_cell(self, cell_id: str, *, expected: str) -> tuple[int, dict[str, Any]]:
        """Always refused."""
        raise DocumentError(self.read_only_reason)

    async def move_cell(self, cell_id: str, *, after: str | None) -> tuple[int, int]:
        """Always refused."""
        raise DocumentError(self.read_only_reason)

    async def write_outputs(
        self, cell_id: str, outputs: Sequence[Mapping[str, Any]], execution_count: int | None
    ) -> None:
        """Always refused."""
        raise DocumentError(self.read_only_reason)

    async def close(self) -> None:
        """Nothing to release."""
