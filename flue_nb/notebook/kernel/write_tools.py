"""The writing tools of the notebook: `insert_cell`, `edit_cell`, `delete_cell`, `move_cell` and
`run_cell` (plain `Tool`s).

With a live document (the notebook open in a JupyterLab or Notebook 7 tab, through flue_nb's
extension; or a Jupyter server with real-time collaboration) the change goes through `Document`,
marked `metadata["flue"]` with its provenance, and `run_cell` writes the outputs and execution
count back; edits and deletions are compare-and-sets against what the agent last read. Without
one, each says exactly what it did instead: `insert_cell` proposes the cell through IPython's
`set_next_input` (below the `%%flue` cell, once it finishes; only while a cell is executing, never
from the chat widget) or writes nothing (an error result); `edit_cell`, `delete_cell` and
`move_cell` cannot; `run_cell` runs the code as a cell of this kernel, in the cell log, not in the
document.
None of them is durable: a crash during `run_cell` leaves the call's outcome unknown and the
cell is never run again on recovery (contract 11.2).
"""

from __future__ import annotations

import difflib
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from flue_nb.notebook.celllog.log import CellLog, CellRecord
from flue_nb.notebook.document.protocol import CellChanged, DocumentError
from flue_nb.notebook.document.saved import find_document, reset_document
from flue_nb.notebook.kernel import _listing
from flue_nb.notebook.kernel._envelope import fence
from flue_nb.notebook.kernel.python_tool import NamespaceWatch, watch_files
from flue_nb.notebook.kernel.read_tools import NO_LOG, NotebookContext
from flue_nb.runtime.effect_capture import keep_blobs
from flue_nb.runtime.effects import EFFECTS_KEY, Bounds, CellEffect, Effects
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput
from flue_nb.runtime.tools.truncate import truncate_head

__all__ = ["cell_question", "edit_diff", "where_written", "write_tools"]

_DIFF_LINES = 60
_BOUNDS = Bounds()


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


class DeleteInput(BaseModel):
    """Input of `delete_cell`."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="The document cell id to delete (as `cells` shows it).")


class MoveInput(BaseModel):
    """Input of `move_cell`."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="The document cell id to move.")
    after: str | None = Field(None, description="Id of the cell to put it below; omit to move it to the top.")


class RunInput(BaseModel):
    """Input of `run_cell`."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, description="A document cell id: run that cell's current source.")
    source: str | None = Field(None, description="Code to run as a new cell of this kernel (when no `id`).")


_INSERT_DESC = (
    "Insert a cell into the user's notebook (code or markdown), after the cell `after` or at the "
    "end. Live in the open notebook (a JupyterLab or Notebook 7 tab, or real-time collaboration); "
    "otherwise it is proposed below the current %%flue cell, or not possible (the result says "
    "which). Prefer it to pasting long code in your answer when the user should keep the code."
)
_EDIT_DESC = (
    "Replace the whole source of a notebook cell (by id). Read the cell first (`cells` or `cell`): "
    "the edit is refused when the cell changed since you read it (the user typed in it), and the "
    "result then holds its current source to read before retrying. The result holds the old source, "
    "so the edit can be undone. Only possible in the open notebook (a tab or collaboration)."
)
_DELETE_DESC = (
    "Delete a notebook cell (by id). Read it first: like `edit_cell`, refused when the cell changed "
    "since you read it. The result holds the deleted cell's source."
)
_MOVE_DESC = "Move a notebook cell (by id) below the cell `after`, or to the top when `after` is omitted."
_RUN_DESC = (
    "Run a cell in this kernel as a real notebook cell (it gets an execution count and is in the "
    "cell log): `id` runs a document cell's current source (its outputs are written back into a "
    "live document), `source` runs new code. Returns its outputs and error."
)


def provenance(ctx: ToolContext) -> dict[str, Any]:
    """`metadata["flue"]` of a cell the agent wrote: who, in which submission, with which call."""
    return {"conversation": ctx.conversation_id, "submission": ctx.submission_id, "tool_call_id": ctx.call_id}


def where_written(doc: Any, index: int | None = None) -> str:
    """Where a write went, as the person reads it: "cell 4 of fix.ipynb in your open tab"."""
    name = os.path.basename(str(getattr(doc, "path", None) or "the notebook"))
    cell = f"cell {index + 1} of {name}" if index is not None else name
    if getattr(doc, "via", None) == "front end":
        return f"{cell} in your open tab"
    return f"{cell} in the live (collaborative) notebook"


def _path_taken(doc: Any) -> str:
    return "tab" if getattr(doc, "via", None) == "front end" else "collaboration"


def _not_written(what: str, exc: DocumentError) -> ToolOutput:
    """`what` ("The cell was not inserted") did not happen, and why: no tab, or the path failed."""
    reach = getattr(exc, "reach", None)
    why = "no front end is connected" if reach in ("no_front_end", "not_open") else "the write failed"
    hint = " Ask the user to open the notebook, or show them the source." if reach else ""
    return ToolOutput(
        f"{what} (not written: {why}: {exc}). Nothing was changed.{hint}",
        is_error=True,
        details={"written": False, "where": "not_written", "reach": reach},
    )


def _refused(nb: NotebookContext, cell_id: str, current: str, why: str) -> ToolOutput:
    nb.seen[cell_id] = current  # the model reads it now, in this result
    return ToolOutput(
        f"Not written: {why}. The cell is left exactly as it is; its current source:\n{fence(current)}\n"
        "Read it, then retry against this source if the change still applies.",
        is_error=True, details={"written": False, "where": "refused", "cell_id": cell_id, "current_source": current},
    )  # fmt: skip


def write_tools(nb: NotebookContext) -> list[Tool]:  # noqa: C901 - five tools sharing one context
    """`insert_cell`, `edit_cell`, `delete_cell`, `move_cell` and `run_cell` on one notebook context."""

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
                if getattr(exc, "reach", None) is not None and coordinator_waits():
                    return _propose(args, nb, f"the open tab could not be reached: {exc}")
                reset_document()
                return _not_written("The cell was not inserted", exc)
            nb.seen[new_id] = args.source
            index = _index_after(cells, args.after)
            return ToolOutput(
                f"Inserted {args.kind} cell {new_id} {'after cell ' + args.after if args.after else 'at the end'}, as "
                f"{where_written(doc, index)}: it shows at once. It has "
                "not run; `run_cell` with its id runs it.",
                details={
                    "cell_id": new_id,
                    "live": True,
                    "written": True,
                    "where": _path_taken(doc),
                    "where_text": where_written(doc, index),
                    "source": args.source,
                    "kind": args.kind,
                    **_cell_effect(
                        CellEffect(
                            "inserted",
                            new_id,
                            doc.path,
                            args.kind,
                            source_after=args.source,
                            index_after=_index_after(cells, args.after),
                        )
                    ),
                },  # fmt: skip
            )
        return _propose(args, nb, note)

    async def edit_cell(args: EditInput, ctx: ToolContext) -> ToolOutput:
        doc, cells, note = await nb.document()
        if doc is None or not doc.live:
            why = (
                "the notebook is known only from its saved file" if doc is not None else "no notebook document is known"
            )
            return ToolOutput(
                f"Cannot edit cell {args.id}: {why}, and edits need the notebook open in a JupyterLab or "
                "Notebook 7 tab (or real-time collaboration). Nothing was changed. Use "
                "`insert_cell` to propose a corrected cell, or show the user the new source."
                + (f" {note}" if note else ""),
                is_error=True,
            )
        current = next((c for c in cells or [] if c.id == args.id), None)
        expected = nb.seen.get(args.id)
        if current is not None and expected is None:
            return _refused(nb, args.id, current.source, f"you have not read cell {args.id} yet")
        try:
            old = await doc.edit_cell(args.id, args.source, metadata={"flue": provenance(ctx)}, expected=expected)
        except CellChanged as exc:
            return _refused(nb, args.id, exc.current, f"cell {args.id} changed since you read it (the user edited it)")
        except DocumentError as exc:
            return _not_written(f"Cell {args.id} was not changed", exc)
        nb.seen[args.id] = args.source
        place = where_written(doc, _index_of(cells, args.id))
        return ToolOutput(
            f"Edited {place} (it shows at once; it has not run). Its old source, for undo:\n{fence(old)}",
            details={
                "cell_id": args.id,
                "live": True,
                "written": True,
                "where": _path_taken(doc),
                "where_text": place,
                "old_source": old,
                "source": args.source,
                **_cell_effect(
                    CellEffect(
                        "edited",
                        args.id,
                        doc.path,
                        source_before=old,
                        source_after=args.source,
                        index_before=_index_of(cells, args.id),
                        index_after=_index_of(cells, args.id),
                    )
                ),
            },  # fmt: skip
        )

    async def delete_cell(args: DeleteInput, ctx: ToolContext) -> ToolOutput:
        doc, cells, note = await nb.document()
        if doc is None or not doc.live:
            return ToolOutput(
                f"Cannot delete cell {args.id}: no open notebook. Nothing was changed. {note}".strip(), True
            )
        current = next((c for c in cells or [] if c.id == args.id), None)
        if current is None:
            return ToolOutput(f"No cell with id {args.id!r}: `cells` lists the ids.", is_error=True)
        expected = nb.seen.get(args.id)
        if expected is None:
            return _refused(nb, args.id, current.source, f"you have not read cell {args.id} yet")
        try:
            index, _ = await doc.delete_cell(args.id, expected=expected)
        except CellChanged as exc:
            return _refused(nb, args.id, exc.current, f"cell {args.id} changed since you read it (the user edited it)")
        except DocumentError as exc:
            return _not_written(f"Cell {args.id} was not changed", exc)
        nb.seen.pop(args.id, None)
        place = where_written(doc, index)
        return ToolOutput(
            f"Deleted {place}. Its source was:\n{fence(expected)}",
            details={
                "cell_id": args.id, "written": True, "where": _path_taken(doc), "where_text": place,
                "old_source": expected,
                **_cell_effect(CellEffect("deleted", args.id, doc.path, current.kind, source_before=expected,
                                          index_before=index)),
            },
        )  # fmt: skip

    async def move_cell(args: MoveInput, ctx: ToolContext) -> ToolOutput:
        doc, cells, note = await nb.document()
        if doc is None or not doc.live:
            return ToolOutput(
                f"Cannot move cell {args.id}: no open notebook. Nothing was changed. {note}".strip(), True
            )
        for wanted in (args.id, args.after):
            if wanted is not None and all(c.id != wanted for c in cells or []):
                return ToolOutput(f"No cell with id {wanted!r}: `cells` lists the ids.", is_error=True)
        try:
            before, after = await doc.move_cell(args.id, after=args.after)
        except DocumentError as exc:
            return _not_written(f"Cell {args.id} was not changed", exc)
        place = where_written(doc, after)
        return ToolOutput(
            f"Moved cell {args.id} from position {before + 1} to {place}.",
            details={"cell_id": args.id, "written": True, "where": _path_taken(doc), "where_text": place,
                     "index_before": before, "index_after": after,
                     **_cell_effect(CellEffect("moved", args.id, doc.path, index_before=before, index_after=after))},
        )  # fmt: skip

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
        # What the code changes is the step's effect, as for `python` (issue 34.1): the names
        # (old values kept within the bounds) and the workspace's files.
        keep = _BOUNDS if ctx.store is not None else None
        files = await watch_files(nb.workspace, ctx, _BOUNDS)

        def go() -> tuple[CellRecord | None, NamespaceWatch, Effects, dict[str, bytes]]:
            ns = nb.namespace()
            watch = NamespaceWatch(source, ns, keep)
            record = _run_in_kernel(log, source, cell_id, provenance(ctx))
            return record, watch, *watch.finish(ns)

        record, watch, changed, blobs = await nb.runner(go)
        if blobs:
            keep_blobs(ctx.store, ctx.conversation_id, blobs, _BOUNDS)
        if record is None:
            return ToolOutput("The cell did not start (the kernel refused to run it).", is_error=True)
        where = await _write_back(doc, cell_id, record, log, _index_of(cells, cell_id))
        text = _listing.cell_text(record, None)
        cut = truncate_head(text)
        more = f"\n[Output cut; `cell` with id #{record.number} pages through it.]" if cut.truncated else ""
        body = fence(cut.text) + more
        ran_effect = CellEffect(
            "ran", cell_id, getattr(doc, "path", None) if cell_id else None, "code",
            source_before=source, source_after=source, index_before=_index_of(cells, cell_id),
        )  # fmt: skip
        details = {
            "run": record.number, "execution_count": record.execution_count, "cell_id": cell_id,
            "outcome": record.outcome, "source": source, "written": where.startswith("Its outputs and"),
            "summary": _listing.output_summary(record),
            EFFECTS_KEY: changed.merged(Effects(cells=(ran_effect,))).to_dict(),
        }  # fmt: skip
        head = f"Ran as [{record.execution_count}] (run #{record.number}): {record.outcome}. {where}"
        names = watch.line()
        out = ToolOutput(
            f"{head}\n{body}" + (f"\n{names}" if names else ""),
            is_error=record.outcome == "error",
            details=details,
            namespace=watch.diff(),
        )
        return await files.record(out)

    return [
        Tool("insert_cell", _INSERT_DESC, InsertInput, insert_cell),
        # The person decides on the cell and its source (for an edit, on the change as a diff).
        Tool("edit_cell", _EDIT_DESC, EditInput, edit_cell, question=cell_question, question_detail=_edit_question),
        Tool("delete_cell", _DELETE_DESC, DeleteInput, delete_cell, question=cell_question),
        Tool("move_cell", _MOVE_DESC, MoveInput, move_cell, question=cell_question),
        Tool("run_cell", _RUN_DESC, RunInput, run_cell, question=cell_question),
    ]


def _cell_effect(effect: CellEffect) -> dict[str, Any]:
    """The `details` entry that records one cell effect (issue 34.1)."""
    return {EFFECTS_KEY: Effects(cells=(effect,)).to_dict()}


def _index_of(cells: Any, cell_id: str | None) -> int | None:
    return next((i for i, c in enumerate(cells or []) if c.id == cell_id), None) if cell_id else None


def _index_after(cells: Any, after: str | None) -> int | None:
    if cells is None:
        return None
    if after is None:
        return len(cells)
    at = _index_of(cells, after)
    return at + 1 if at is not None else None


def cell_question(data: Mapping[str, Any]) -> str | None:
    """How the approval question names a call of a tool that names a cell: which one, then the
    source the person decides on (None without a cell id: the call's summary text)."""
    if not isinstance(data.get("id"), str):
        return None
    source = data.get("source")
    return f"cell {data['id']}: {source}" if isinstance(source, str) else f"cell {data['id']} (its current source)"


async def edit_diff(data: Mapping[str, Any], namespace: Mapping[str, Any]) -> str | None:
    """What a person deciding on `edit_cell` sees: the change as a diff against the cell as it is
    now in the document (None when the cell is not found: the question's line is asked)."""
    if not isinstance(data.get("id"), str) or not isinstance(data.get("source"), str):
        return None
    try:
        doc = await find_document(namespace)
        cells = await doc.cells() if doc is not None else []
    except DocumentError:
        return None
    old = next((c.source for c in cells if c.id == data["id"]), None)
    if old is None:
        return None
    diff = list(difflib.unified_diff(old.splitlines(), data["source"].splitlines(), "now", "proposed", lineterm=""))
    if len(diff) > _DIFF_LINES:
        diff = [*diff[:_DIFF_LINES], f"… ({len(diff) - _DIFF_LINES} more diff lines)"]
    return f"edit_cell: cell {data['id']}\n" + ("\n".join(diff) if diff else "(the source would not change)")


async def _edit_question(data: Mapping[str, Any]) -> str | None:
    shell = _shell()
    return await edit_diff(data, shell.user_ns if shell is not None else {})


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
    # Not imported here: a kernel's shell means its module is loaded already, and importing it
    # from the warm-up thread defined IPython's magics classes there while the main thread
    # defined others (`%config` loading the lazy ones): IPython's magics registry is one global
    # dict, so the classes got each other's magics (`'CodeMagics' object has no attribute
    # 'alias_magic'`, or a `%config` that did not apply).
    zmqshell = sys.modules.get("ipykernel.zmqshell")
    return zmqshell is not None and isinstance(shell, zmqshell.ZMQInteractiveShell)


def coordinator_waits() -> bool:
    """True while a %%flue cell is executing (a proposed cell has somewhere to go)."""
    from flue_nb.runtime.coordinator import coordinator

    return bool(coordinator().has_waiter)


def _not_inserted(args: InsertInput) -> dict[str, object]:
    """The details of an insert that reached no notebook: the source kept for the answer."""
    return {
        "live": False,
        "proposed": False,
        "written": False,
        "where": "not_written",
        "source": args.source,
        "kind": args.kind,
    }


def _propose(args: InsertInput, nb: NotebookContext, note: str) -> ToolOutput:
    from flue_nb.runtime.coordinator import coordinator

    shell = _shell()
    ns = nb.namespace() if shell is not None else {}
    front = _front_end(shell, ns) if shell is not None else "headless"
    # An error result: the call did not do what it was asked, and a card must not draw a ✓ for
    # a cell that is nowhere (the model is told to give the source in its answer instead).
    nothing = "Nothing was inserted"
    if front == "headless":
        return ToolOutput(
            f"{nothing}: this kernel runs headless (no notebook editor is attached), so there is no "
            "notebook to insert into. Give the user the source in your answer instead.",
            is_error=True,
            details=_not_inserted(args),
        )
    if front == "vscode":
        return ToolOutput(
            f"{nothing}: VS Code does not accept cells proposed by the kernel and has no live document "
            "for flue_nb. Give the user the source in your answer to paste into a cell.",
            is_error=True,
            details=_not_inserted(args),
        )
    if not coordinator().has_waiter:
        return ToolOutput(
            f"{nothing}: a cell can be proposed only while a %%flue cell is executing, and this run is "
            "not attached to one (it comes from the chat widget or runs in the background), so there is "
            "no cell to put it under. Give the user the source in your answer.",
            is_error=True,
            details=_not_inserted(args),
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
        details={
            "live": False,
            "proposed": True,
            "written": False,
            "where": "proposed",
            "source": args.source,
            "kind": args.kind,
        },
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
        result = shell.run_cell(source, store_history=True, cell_id=cell_id)
    finally:
        del shell._showtraceback
    if isinstance(getattr(result, "error_in_exec", None), KeyboardInterrupt) and (
        threading.current_thread() is threading.main_thread()
    ):
        # IPython takes the stop button's KeyboardInterrupt as the cell's error; it is the
        # submission's interrupt, as during `python`: raised again, it aborts the submission.
        raise KeyboardInterrupt
    return log.last_agent


async def _write_back(doc: Any, cell_id: str | None, record: CellRecord, log: CellLog, index: int | None) -> str:
    if doc is None or not doc.live:
        return "It is not in the notebook document (no live document): it ran in the kernel only."
    if cell_id is None:
        return "It ran in the kernel only (new code, not a document cell)."
    try:
        await doc.write_outputs(cell_id, nbformat_outputs(record, log), record.execution_count)
    except DocumentError as exc:
        if getattr(exc, "reach", None) is None:
            reset_document()
        return f"Its outputs were not written into the notebook ({exc}): it ran in the kernel only."
    return f"Its outputs and execution count are written into {where_written(doc, index)}."


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
