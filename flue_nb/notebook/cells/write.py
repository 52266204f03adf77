"""The writing tools of the notebook: `insert_cell`, `edit_cell` and `run_cell` (plain `Tool`s).

With a live document (a Jupyter server with real-time collaboration) the change goes through
`Document`, marked `metadata["flue"]` with its provenance, and `run_cell` writes the outputs and
execution count back. Without one, each says exactly what it did instead: `insert_cell` proposes
the cell through IPython's `set_next_input` (below the `%%flue` cell, once it finishes; only while
a cell is executing, never from the chat widget) or, headless, writes nothing; `edit_cell` cannot
edit; `run_cell` runs the code as a cell of this kernel, in the cell log, not in the document.
None of them is durable: a crash during `run_cell` leaves the call's outcome unknown and the
cell is never run again on recovery (contract 11.2).
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from flue_nb.notebook.cells import _listing
from flue_nb.notebook.cells._envelope import fence
from flue_nb.notebook.cells.document import DocumentError
from flue_nb.notebook.cells.log import CellLog, CellRecord
from flue_nb.notebook.cells.saved import find_document, reset_document
from flue_nb.notebook.cells.tools import NO_LOG, NotebookContext
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput
from flue_nb.runtime.tools.truncate import truncate_head

__all__ = ["approval_summary", "write_tools"]

_DIFF_LINES = 60


class InsertInput(BaseModel):
    """Input of `insert_cell`."""

    model_config = ConfigDict(extra="forbid")
    source: str = Field(description="The new cell's source.")
    kind: Literal["code", "markdown"] = Field("code", description="`code` or `markdown`.")
    after: str | None = Field(None, description="Id of the cell to insert after; omit for the end.")


class EditInput(BaseModel):
    """Input of `edit_cell`."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="The document cell id to edit (as `cells` shows it).")
    source: str = Field(description="The cell's whole new source.")


class RunInput(BaseModel):
    """Input of `run_cell`."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, description="A document cell id: run that cell's current source.")
    source: str | None = Field(None, description="Code to run as a new cell of this kernel (when no `id`).")


_INSERT_DESC = (
    "Insert a cell into the user's notebook (code or markdown), after the cell `after` or at the "
    "end. Live where the Jupyter server has real-time collaboration; otherwise it is proposed below "
    "the current %%flue cell, or not possible (the result says which). Prefer it to pasting long "
    "code in your answer when the user should keep the code."
)
_EDIT_DESC = (
    "Replace the whole source of a notebook cell (by id). The result holds the old source, so the "
    "edit can be undone. Only possible with a live document (real-time collaboration)."
)
_RUN_DESC = (
    "Run a cell in this kernel as a real notebook cell (it gets an execution count and is in the "
    "cell log): `id` runs a document cell's current source (its outputs are written back into a "
    "live document), `source` runs new code. Returns its outputs and error."
)


def provenance(ctx: ToolContext) -> dict[str, Any]:
    """`metadata["flue"]` of a cell the agent wrote: who, in which submission, with which call."""
    return {"conversation": ctx.conversation_id, "submission": ctx.submission_id, "tool_call_id": ctx.call_id}


def write_tools(nb: NotebookContext) -> list[Tool]:
    """`insert_cell`, `edit_cell` and `run_cell` on one notebook context."""

    async def insert_cell(args: InsertInput, ctx: ToolContext) -> ToolOutput:
        doc, cells, note = await nb.document()
        if doc is not None and doc.live:
            if args.after is not None and cells is not None and all(c.id != args.after for c in cells):
                return ToolOutput(f"No cell with id {args.after!r} to insert after: `cells` lists the ids.", True)
            try:
                new_id = await doc.insert_cell(
                    args.source, kind=args.kind, after=args.after, metadata={"flue": provenance(ctx)}
                )
            except DocumentError as exc:
                reset_document()
                return ToolOutput(f"The cell was not inserted: {exc}", is_error=True)
            where = f"after cell {args.after}" if args.after else "at the end"
            return ToolOutput(
                f"Inserted {args.kind} cell {new_id} {where} in the live notebook {doc.path}: it shows at once "
                "in every open view. It has not run; `run_cell` with its id runs it.",
                details={"cell_id": new_id, "live": True, "source": args.source, "kind": args.kind},
            )
        return _propose(args, nb, note)

    async def edit_cell(args: EditInput, ctx: ToolContext) -> ToolOutput:
        doc, cells, note = await nb.document()
        if doc is None or not doc.live:
            why = (
                "the notebook is known only from its saved file" if doc is not None else "no notebook document is known"
            )
            return ToolOutput(
                f"Cannot edit cell {args.id}: {why}, and edits need a live document (a Jupyter server with "
                "real-time collaboration, `pip install flue_nb[live]`). Nothing was changed. Use "
                "`insert_cell` to propose a corrected cell, or show the user the new source."
                + (f" {note}" if note else ""),
                is_error=True,
            )
        try:
            old = await doc.edit_cell(args.id, args.source, metadata={"flue": provenance(ctx)})
        except DocumentError as exc:
            return ToolOutput(f"Cell {args.id} was not edited: {exc}", is_error=True)
        return ToolOutput(
            f"Edited cell {args.id} in the live notebook {doc.path} (everyone with it open sees the change; it "
            f"has not run). Its old source, for undo:\n{fence(old)}",
            details={"cell_id": args.id, "live": True, "old_source": old, "source": args.source},
        )

    async def run_cell(args: RunInput, ctx: ToolContext) -> ToolOutput:
        log = nb.log()
        if log is None:
            return ToolOutput(NO_LOG, is_error=True)
        doc, cells, note = await nb.document()
        cell_id = None
        if args.id is not None:
            doc_cell = next((c for c in cells or [] if c.id == args.id), None)
            if doc_cell is not None:
                source, cell_id = doc_cell.source, doc_cell.id
            else:
                ran = next((r for r in reversed(log.records()) if r.cell_id == args.id), None)
                if ran is None:
                    return ToolOutput(f"No cell with id {args.id!r}: `cells` lists the ids." + note, is_error=True)
                source, cell_id = ran.source, ran.cell_id
        elif args.source is not None:
            source = args.source
        else:
            return ToolOutput("Give `id` (a cell of the notebook) or `source` (code to run).", is_error=True)
        record: CellRecord | None = await nb.runner(lambda: _run_in_kernel(log, source, cell_id, provenance(ctx)))
        if record is None:
            return ToolOutput("The cell did not start (the kernel refused to run it).", is_error=True)
        where = await _write_back(doc, cell_id, record, log)
        text = _listing.cell_text(record, None)
        cut = truncate_head(text)
        more = f"\n[Output cut; `cell` with id #{record.number} pages through it.]" if cut.truncated else ""
        body = fence(cut.text) + more
        details = {
            "run": record.number, "execution_count": record.execution_count, "cell_id": cell_id,
            "outcome": record.outcome, "source": source, "written": where.startswith("Its outputs"),
            "summary": _listing.output_summary(record),
        }  # fmt: skip
        head = f"Ran as [{record.execution_count}] (run #{record.number}): {record.outcome}. {where}"
        return ToolOutput(f"{head}\n{body}", is_error=record.outcome == "error", details=details)

    return [
        Tool("insert_cell", _INSERT_DESC, InsertInput, insert_cell),
        Tool("edit_cell", _EDIT_DESC, EditInput, edit_cell),
        Tool("run_cell", _RUN_DESC, RunInput, run_cell),
    ]


async def approval_summary(tool_name: str, args: Mapping[str, Any], summary: str, namespace: dict[str, Any]) -> str:
    """What a person deciding on `edit_cell` sees: the change as a diff against the cell as it is
    now in the document (the plain summary for any other call, or when the cell is not found)."""
    if tool_name != "edit_cell" or not isinstance(args.get("id"), str) or not isinstance(args.get("source"), str):
        return summary
    try:
        doc = await find_document(namespace)
        cells = await doc.cells() if doc is not None else []
    except DocumentError:
        return summary
    old = next((c.source for c in cells if c.id == args["id"]), None)
    if old is None:
        return summary
    diff = list(difflib.unified_diff(old.splitlines(), args["source"].splitlines(), "now", "proposed", lineterm=""))
    if len(diff) > _DIFF_LINES:
        diff = [*diff[:_DIFF_LINES], f"… ({len(diff) - _DIFF_LINES} more diff lines)"]
    return f"edit_cell: cell {args['id']}\n" + ("\n".join(diff) if diff else "(the source would not change)")


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _front_end(shell: Any, namespace: dict[str, Any]) -> Literal["vscode", "jupyter", "terminal", "headless"]:
    if namespace.get("__vsc_ipynb_file__"):
        return "vscode"
    if "ipykernel" not in sys.modules or not _is_kernel_shell(shell):
        return "terminal"
    if os.environ.get("JPY_SESSION_NAME") or "google.colab" in sys.modules:
        return "jupyter"
    return "headless"  # nbclient, nbconvert, `flue-nb run`: no one sees a proposed cell


def _is_kernel_shell(shell: Any) -> bool:
    """A kernel's shell (ipykernel's, or a subclass such as Colab's), not terminal IPython."""
    from ipykernel.zmqshell import ZMQInteractiveShell

    return isinstance(shell, ZMQInteractiveShell)


def _propose(args: InsertInput, nb: NotebookContext, note: str) -> ToolOutput:
    from flue_nb.runtime.coordinator import coordinator

    shell = _shell()
    ns = nb.namespace() if shell is not None else {}
    front = _front_end(shell, ns) if shell is not None else "headless"
    nothing = "Nothing was inserted"
    if front == "headless":
        return ToolOutput(
            f"{nothing}: this kernel runs headless (no notebook editor is attached), so there is no "
            "notebook to insert into. Give the user the source in your answer instead.",
            details={"live": False, "proposed": False, "source": args.source, "kind": args.kind},
        )
    if front == "vscode":
        return ToolOutput(
            f"{nothing}: VS Code does not accept cells proposed by the kernel and has no live document "
            "for flue_nb. Give the user the source in your answer to paste into a cell.",
            details={"live": False, "proposed": False, "source": args.source, "kind": args.kind},
        )
    if not coordinator().has_waiter:
        return ToolOutput(
            f"{nothing}: a cell can be proposed only while a %%flue cell is executing, and this run is "
            "not attached to one (it comes from the chat widget or runs in the background), so there is "
            "no cell to put it under. Give the user the source in your answer.",
            details={"live": False, "proposed": False, "source": args.source, "kind": args.kind},
        )
    text = args.source if args.kind == "code" else "%%markdown\n" + args.source
    earlier, extra = _pending_proposal(shell), ""
    if earlier is not None and args.kind == "code" and not earlier.startswith("%%markdown"):
        # One proposal per cell reaches the front end: keep the earlier code rather than lose it.
        text = earlier.rstrip("\n") + "\n\n" + text
        extra = " It is joined to the code you proposed earlier in this cell, as one cell (one proposal per cell)."
    elif earlier is not None:
        extra = " It replaces the cell you proposed earlier in this cell (one proposal per cell)."
    shell.set_next_input(text, replace=False)
    where = "below the %%flue cell" if front == "jupyter" else "as the next input at the prompt"
    how = " (as a `%%markdown` cell)" if args.kind == "markdown" else ""
    return ToolOutput(
        f"Proposed the cell{how} {where}: it appears when this cell finishes, not yet run, and it is "
        f"not in the notebook until then (there is no live document{'; ' + note if note else ''}).{extra}",
        details={"live": False, "proposed": True, "source": args.source, "kind": args.kind},
    )


def _pending_proposal(shell: Any) -> str | None:
    """The text of the cell already proposed in this execution, if any."""
    payloads: list[Any] = getattr(getattr(shell, "payload_manager", None), "read_payload", list)()
    for p in payloads:
        if isinstance(p, dict) and p.get("source") == "set_next_input":
            return str(p.get("text", ""))
    return None


def _run_in_kernel(log: CellLog, source: str, cell_id: str | None, prov: dict[str, Any]) -> CellRecord | None:
    """Run `source` through IPython's `run_cell` (events, history, execution count), quietly."""
    shell = _shell()
    if shell is None:
        raise RuntimeError("run_cell needs a running IPython kernel")
    log.expect_agent_cell(prov)
    # The traceback goes to the tool's result, not as an error output under the %%flue cell.
    shell._showtraceback = lambda *a, **k: None
    try:
        shell.run_cell(source, store_history=True, cell_id=cell_id)
    finally:
        del shell._showtraceback
    return log.last_agent


async def _write_back(doc: Any, cell_id: str | None, record: CellRecord, log: CellLog) -> str:
    if doc is None or not doc.live:
        return "It is not in the notebook document (no live document): it ran in the kernel only."
    if cell_id is None:
        return "It ran in the kernel only (new code, not a document cell)."
    try:
        await doc.write_outputs(cell_id, nbformat_outputs(record, log), record.execution_count)
    except DocumentError as exc:
        reset_document()
        return f"Its outputs could not be written to the document: {exc}."
    return f"Its outputs and execution count are written into cell {cell_id} of the live notebook."


def nbformat_outputs(record: CellRecord, log: CellLog) -> list[dict[str, Any]]:
    """The run's outputs as nbformat v4 dicts (streams, results, displays, the error)."""
    out: list[dict[str, Any]] = []
    for name in ("stdout", "stderr"):
        if record.stream(name):
            out.append({"output_type": "stream", "name": name, "text": record.stream(name)})
    for output in record.outputs:
        data: dict[str, Any] = {}
        for mime, value in output.get("data", {}).items():
            if isinstance(value, str):
                data[mime] = value
            elif isinstance(value, dict) and value.get("digest") in log.images:
                data[mime] = log.images[value["digest"]][1]
        item: dict[str, Any] = {"output_type": output["output_type"], "data": data, "metadata": {}}
        if output["output_type"] == "execute_result":
            item["execution_count"] = record.execution_count
        out.append(item)
    if record.error is not None:
        out.append({
            "output_type": "error", "ename": record.error.type, "evalue": record.error.message,
            "traceback": record.error.traceback.splitlines(),
        })  # fmt: skip
    return out
