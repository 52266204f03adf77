"""`python_tool="cells"`: a `python` call that changes the namespace is also written into the
notebook as a provenance-marked code cell as it runs, so the saved notebook reruns to the same
state (`%flue verify`). Only where the document can be written live (a Jupyter server with
real-time collaboration); elsewhere the call's result says the cell was not written, and
`%flue materialize` proposes it later.

The cell goes after the cell running the conversation (the `%%flue` cell, by the id its front end
sent, from the cell log), or after the cell this run wrote last, so the calls keep their order;
without a running cell (a chat) it goes at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from flue_nb.notebook.celllog.log import cell_log
from flue_nb.notebook.document.protocol import DocumentError
from flue_nb.notebook.document.saved import find_document
from flue_nb.notebook.kernel.python_tool import OnChange
from flue_nb.runtime.facts import NamespaceDiff
from flue_nb.runtime.tools.tool import ToolContext

__all__ = ["PythonToolMode", "cell_source", "cell_writer"]

PythonToolMode = Literal["hidden", "cells"]
"""`hidden`: the `python` tool's code is in no cell (the default); `cells`: also written as one."""


def cell_source(code: str, diff: NamespaceDiff, call_id: str) -> str:
    """The cell for one call: a one-line comment of what it did, then its code."""
    parts = []
    for label, names in (("created", diff.added), ("changed", diff.changed), ("deleted", diff.removed)):
        if names:
            parts.append(f"{label} {', '.join(names)}")
    return f"# flue: {'; '.join(parts)} (the agent's python call {call_id})\n{code.rstrip()}"


def cell_writer(namespace: Callable[[], Mapping[str, Any]]) -> OnChange:
    """The `on_change` of the `python` tool under `python_tool="cells"`."""
    last: dict[str | None, str] = {}  # submission -> the cell this run wrote last

    async def write(code: str, diff: NamespaceDiff, ctx: ToolContext) -> str | None:
        ns = namespace()
        try:
            doc = await find_document(ns)
        except Exception:  # noqa: BLE001 - finding no document is the same note as a read-only one
            doc = None
        if doc is None or not doc.live:
            return (
                "(python_tool='cells': this code was not written into the notebook: there is no live document "
                "to write to here; `%flue materialize` proposes it as a cell)"
            )
        after = last.get(ctx.submission_id) or _running_cell_id()
        meta = {
            "flue": {
                "conversation": ctx.conversation_id, "submission": ctx.submission_id, "tool_call_id": ctx.call_id,
                "materialized": True,
            }
        }  # fmt: skip
        try:
            new_id = await doc.insert_cell(cell_source(code, diff, ctx.call_id or ""), after=after, metadata=meta)
        except DocumentError as exc:
            return f"(python_tool='cells': the cell could not be written: {exc})"
        last[ctx.submission_id] = new_id
        return f"(python_tool='cells': written into the notebook as cell {new_id}, not run again)"

    return write


def _running_cell_id() -> str | None:
    """The document id of the cell running now (the `%%flue` cell), when the front end sent one."""
    log = cell_log()
    record = log.running() if log is not None else None
    return record.cell_id if record is not None and record.cell_id else None
