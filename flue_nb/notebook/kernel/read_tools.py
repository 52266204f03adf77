"""The read tools of the notebook: `cells`, `cell` and `variables` (plain `Tool`s).

Everything they return from the notebook (sources, outputs, values) is fenced as untrusted data
(`_envelope`). `cells` pages like `read` (`offset`/`limit`, cut to 2000 lines / 50 KB with
`Use offset=N to continue.`); `cell` cuts one cell's text by `read`'s rules and returns its kept
images as image blocks; `variables` runs where the namespace lives (the kernel's main thread).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from flue_nb.notebook.celllog.log import CellLog, CellRecord, cell_log
from flue_nb.notebook.document.protocol import DocumentError, NotebookCell
from flue_nb.notebook.document.runner import Runner
from flue_nb.notebook.document.saved import find_document, reset_document
from flue_nb.notebook.kernel import _listing, _variables
from flue_nb.notebook.kernel._envelope import fence
from flue_nb.runtime.messages import ImagePart
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput
from flue_nb.runtime.tools.truncate import MAX_BYTES, MAX_LINES, truncate_head

__all__ = ["Namespace", "NotebookContext", "read_tools"]

Namespace = Callable[[], dict[str, Any]]
MAX_IMAGES = 4
NO_LOG = (
    "No cell log in this kernel: the notebook tools see cells only where the flue_nb extension "
    "is loaded (`%load_ext flue_nb`), from the moment it was loaded."
)


class NotebookContext:
    """What the notebook tools share: the cell log, the namespace, the document."""

    def __init__(
        self,
        namespace: Namespace,
        runner: Runner,
        log: Callable[[], CellLog | None] = cell_log,
        *,
        workspace: str | None = None,
    ) -> None:
        self.namespace = namespace
        self.runner = runner
        self._log = log
        self.workspace = workspace
        """The directory whose files `run_cell`'s effect record covers (None: no file effects)."""
        self.seen: dict[str, str] = {}
        """Each document cell's source as the agent last read it (or wrote it): what a write compares with."""

    def saw(self, cells: list[NotebookCell] | None) -> None:
        """Record what the agent has just been shown of these cells."""
        for c in cells or []:
            self.seen[c.id] = c.source

    def log(self) -> CellLog | None:
        """This kernel's cell log, or None where the extension is not loaded."""
        return self._log()

    async def document(self) -> tuple[Any, list[NotebookCell] | None, str]:
        """The document, its cells, and a note for the model when it could not be read."""
        try:
            ns = self.namespace()
        except Exception:  # noqa: BLE001 - outside IPython: no namespace, no notebook path
            ns = {}
        doc = await find_document(ns, self.runner)
        if doc is None:
            return None, None, ""
        try:
            return doc, await doc.cells(), ""
        except DocumentError as exc:
            if doc.live:
                reset_document()
            return None, None, f"(The document could not be read: {exc}.)"


class CellsInput(BaseModel):
    """Input of `cells`."""

    model_config = ConfigDict(extra="forbid")
    order: Literal["execution", "document"] = Field(
        "execution",
        description="`execution`: cells as they ran in this kernel; `document`: as the notebook orders them.",
    )
    offset: int | None = Field(None, ge=1, description="1-based entry to start from.")
    limit: int | None = Field(None, ge=1, description="Most entries to show.")


class CellInput(BaseModel):
    """Input of `cell`."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, description="A cell id (the document's, as `cells` shows it) or a run `#N`.")
    execution_count: int | None = Field(None, description="The execution count shown as [N].")
    last_error: bool = Field(False, description="True for the last cell that raised.")
    offset: int | None = Field(None, ge=1, description="1-based line of the cell's text to start from.")


class VariablesInput(BaseModel):
    """Input of `variables`."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(None, description="One variable to describe in detail; omit for all.")


_CELLS_DESC = (
    "List the notebook's cells: by default in the order they ran in this kernel (`#N` is the run, "
    '[N] the execution count), or `order="document"` in the notebook\'s order when the notebook is '
    "known. Each line: id, outcome, the first source line and a one-line output summary. Marks: "
    "✎ edited since it ran, ○ never run here, ↕ ran before a cell above it (out of order), ↻ run "
    "again later. Page with `offset`/`limit`."
)
_CELL_DESC = (
    "Show one cell whole: its source, stdout/stderr, outputs (images as images) and its error "
    "with traceback. Give `id` (a document cell id or a run `#N`), `execution_count`, or "
    "`last_error=true` for the last cell that raised."
)
_VARIABLES_DESC = (
    "Summarise the user's variables in the kernel: names, types, sizes (DataFrames with shape, "
    "columns and memory; arrays with shape and dtype). Give `name` for one variable in detail "
    "(dtypes and first rows for a DataFrame)."
)


def read_tools(nb: NotebookContext) -> list[Tool]:
    """`cells`, `cell` and `variables` on one notebook context."""

    async def cells(args: CellsInput, ctx: ToolContext) -> ToolOutput:
        log = nb.log()
        if log is None:
            return ToolOutput(NO_LOG, is_error=True)
        _, doc_cells, note = await nb.document()
        nb.saw(doc_cells)
        records = log.records()
        if args.order == "document":
            if doc_cells is None:
                return ToolOutput(
                    "The notebook document is not known in this kernel (no Jupyter server named it and "
                    "no saved notebook was found), so there is no document order; "
                    '`cells` without `order="document"` lists the cells in the order they ran.'
                    + (f" {note}" if note else ""),
                    is_error=True,
                )
            entries = _listing.document_entries(records, doc_cells)
            title = f"{len(entries)} cells in document order"
        else:
            entries = _listing.execution_entries(records, doc_cells)
            title = f"{len(entries)} cells in execution order (this kernel, since the extension loaded)"
        return _page(title, [e.text for e in entries], args.offset, args.limit, note)

    async def cell(args: CellInput, ctx: ToolContext) -> ToolOutput:
        log = nb.log()
        if log is None:
            return ToolOutput(NO_LOG, is_error=True)
        _, doc_cells, note = await nb.document()
        found = _find(log.records(), doc_cells, args)
        if isinstance(found, str):
            return ToolOutput(found + (f" {note}" if note else ""), is_error=True)
        record, doc_cell = found
        nb.saw([doc_cell] if doc_cell is not None else None)
        text = _listing.cell_text(record, doc_cell)
        return _cell_output(_listing.cell_header(record, doc_cell), text, args.offset, _images(log, record))

    async def variables(args: VariablesInput, ctx: ToolContext) -> ToolOutput:
        def describe() -> str:
            ns = nb.namespace()
            if args.name is not None:
                if args.name not in ns:
                    names = _variables.user_names(ns)[:50]
                    if not names:
                        return f"\0No variable `{args.name}` in the namespace, which holds no user variables."
                    # Names are the namespace's text (any string can be a key): fenced like values.
                    return f"\0No variable `{args.name}` in the namespace. Variables:\n{fence(', '.join(names))}"
                return _variables.describe_one(args.name, ns[args.name])
            lines = _variables.describe_all(ns)
            return "\n".join(lines) if lines else "(no user variables yet)"

        text: str = await nb.runner(describe)
        if text.startswith("\0"):
            return ToolOutput(text[1:], is_error=True)
        cut = truncate_head(text)
        what = f"Variable `{args.name}`:" if args.name else "The user's variables:"
        body = f"{what}\n{fence(cut.text)}"
        if cut.truncated:
            body += f"\n[Showing {cut.shown_lines} of {cut.total_lines} lines; give `name` for one variable.]"
        return ToolOutput(body)

    return [
        Tool("cells", _CELLS_DESC, CellsInput, cells, read_only=True),
        Tool("cell", _CELL_DESC, CellInput, cell, read_only=True),
        Tool("variables", _VARIABLES_DESC, VariablesInput, variables, read_only=True),
    ]


def _page(title: str, lines: list[str], offset: int | None, limit: int | None, note: str) -> ToolOutput:
    total = len(lines)
    start = (offset or 1) - 1
    if total and start >= total:
        return ToolOutput(f"offset {offset} is past the end: there are {total} entries.", is_error=True)
    chosen = lines[start : start + limit] if limit else lines[start:]
    cut = truncate_head("\n".join(chosen), max_lines=MAX_LINES, max_bytes=MAX_BYTES - 2048)
    body = fence(cut.text) if chosen else "(no cells yet)"
    shown_to = start + cut.shown_lines
    parts = [f"{title}; entries {start + 1}-{shown_to}:" if chosen else f"{title}.", body]
    if cut.truncated:
        parts.append(f"[Showing entries {start + 1}-{shown_to} of {total}. Use offset={shown_to + 1} to continue.]")
    elif limit and shown_to < total:
        parts.append(f"[{total - shown_to} more entries after these: offset={shown_to + 1}.]")
    if note:
        parts.append(note)
    return ToolOutput("\n".join(parts))


def _find(
    records: list[CellRecord], cells: list[NotebookCell] | None, args: CellInput
) -> tuple[CellRecord | None, NotebookCell | None] | str:
    runs = [r for r in records if r.kind != "flue"]
    record: CellRecord | None = None
    if args.last_error:
        record = next((r for r in reversed(runs) if r.outcome == "error"), None)
        if record is None:
            return "No cell has raised in this kernel since the extension loaded."
    elif args.execution_count is not None:
        record = next((r for r in reversed(records) if r.execution_count == args.execution_count), None)
        if record is None:
            return f"No cell ran with execution count [{args.execution_count}] in this kernel's log."
    elif args.id:
        wanted = args.id.strip()
        if wanted.startswith("#") and wanted[1:].isdigit():
            record = next((r for r in records if r.number == int(wanted[1:])), None)
            if record is None:
                return f"No run {wanted} in the log (it keeps the most recent cells)."
        else:
            record = next((r for r in reversed(records) if r.cell_id == wanted), None)
            doc_cell = next((c for c in cells or [] if c.id == wanted), None)
            if record is None and doc_cell is None:
                return f"No cell with id {wanted!r}: `cells` lists the ids."
            return record, doc_cell
    else:
        return "Give `id`, `execution_count` or `last_error=true`."
    doc_cell = next((c for c in cells or [] if record.cell_id and c.id == record.cell_id), None)
    return record, doc_cell


def _cell_output(header: str, text: str, offset: int | None, images: list[ImagePart]) -> ToolOutput:
    lines = text.split("\n")
    start = (offset or 1) - 1
    if start >= len(lines):
        return ToolOutput(f"offset {offset} is past the end: the cell's text has {len(lines)} lines.", is_error=True)
    cut = truncate_head("\n".join(lines[start:]), max_bytes=MAX_BYTES - 1024)
    body = f"{header}\n{fence(cut.text)}"
    if cut.truncated:
        last = start + cut.shown_lines
        body += f"\n[Showing lines {start + 1}-{last} of {len(lines)}. Use offset={last + 1} to continue.]"
    return ToolOutput(body, images=images if start == 0 else [])


def _images(log: CellLog, record: CellRecord | None) -> list[ImagePart]:
    if record is None:
        return []
    from flue_nb.runtime.images import image_from_bytes

    out: list[ImagePart] = []
    for output in record.outputs:
        for mime, value in output.get("data", {}).items():
            if not (mime.startswith("image/") and isinstance(value, dict)):
                continue
            kept = log.images.get(value.get("digest", ""))
            if kept is None or len(out) >= MAX_IMAGES:
                continue
            try:
                out.append(image_from_bytes(base64.b64decode(kept[1]), label=f"cell #{record.number} output"))
            except Exception:  # noqa: BLE001 - an image that cannot be decoded is left out, not fatal
                continue
    return out
