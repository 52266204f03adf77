"""`%flue materialize` and `session.materialize(...)`: the agent's state-changing `python` calls
become code cells of the notebook, so that a rerun makes the same state (`verify` then passes).

Each cell holds the call's code under a one-line comment of what it did, and is marked
`metadata["flue"]` with its provenance (conversation, submission, tool call id, step). Cells go
after the `%%flue` cell whose run made the calls (found by the submission id in its outputs'
metadata), in the order the calls ran; a run no cell shows (a chat's) goes at the end. Calls that
changed no name are left out, and so are calls that raised (their code fails when rerun; what
they changed before raising is named). Where the document can be written live (a Jupyter server
with real-time collaboration) the cells are inserted; otherwise they are proposed as the notebook
tools propose an insert (one cell below the running cell, `set_next_input`) or, headless, only
shown in the answer, which says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from flue_nb.notebook.document.protocol import Document, DocumentError
from flue_nb.notebook.verify.steps import AgentStep, agent_steps, recreated_by

__all__ = ["Materialized", "cell_for", "materialize", "place_cells"]


@dataclass(slots=True)
class Materialized:
    """What `materialize` did."""

    cells: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(source, metadata) of each cell, in order."""
    written: Literal["live", "proposed", "shown", "nothing"] = "nothing"
    skipped: list[str] = field(default_factory=list)
    where: str = ""

    def text(self) -> str:
        """The answer a person reads."""
        if not self.cells:
            lines = ["flue materialize: no state-changing python call of the agent is missing from the notebook."]
        elif self.written == "live":
            lines = [f"flue materialize: inserted {len(self.cells)} cell(s) into the live notebook {self.where}."]
        elif self.written == "proposed":
            lines = [
                f"flue materialize: proposed {len(self.cells)} step(s) as one cell below this one (there is no live "
                "document to insert into: run it, or paste it where the run happened, to keep them)."
            ]
        else:
            lines = [
                f"flue materialize: {len(self.cells)} cell(s) to add (nothing was written: no notebook document "
                "can be edited from here); copy them after the run's cell:"
            ]
            for source, _meta in self.cells:
                lines += ["", source]
        lines += [f"- {s}" for s in self.skipped]
        return "\n".join(lines)


def cell_for(step: AgentStep) -> tuple[str, dict[str, Any]]:
    """The cell that recreates one step: a comment of what it did, then its code; its provenance."""
    comment = (
        f"# flue: {step.what().replace('`', '')} (the agent's python call, step {step.step} of {step.submission_id})"
    )
    meta = {
        "flue": {
            "conversation": step.conversation_id,
            "submission": step.submission_id,
            "tool_call_id": step.call_id,
            "step": step.step,
            "materialized": True,
        }
    }
    return f"{comment}\n{step.code.rstrip()}", meta


def steps_to_write(
    store: Any, conversation_id: str, submission_id: str | None, cells: list[tuple[str, dict[str, Any]]]
) -> tuple[list[AgentStep], list[str]]:
    """The python steps to put into the notebook (not yet recreated by a cell), and what was left out."""
    steps = agent_steps(store, [conversation_id], [submission_id] if submission_id else None)
    keep, skipped = [], []
    for step in steps:
        if step.tool != "python" or recreated_by(step, cells):
            continue
        if step.failed:
            skipped.append(
                f"step {step.step} of {step.submission_id} raised, so its code is not written (it would fail "
                f"when rerun); it {step.what()} before raising"
            )
            continue
        keep.append(step)
    return keep, skipped


async def place_cells(doc: Document, steps: list[AgentStep]) -> str:
    """Insert each step's cell after its run's `%%flue` cell in a live `doc`; say where."""
    cells = await doc.cells()
    after: dict[str, str | None] = {}
    for step in steps:
        sid = step.submission_id
        if sid not in after:
            after[sid] = next((c.id for c in cells if sid in _submissions(c.outputs)), None)
        source, meta = cell_for(step)
        after[sid] = await doc.insert_cell(source, kind="code", after=after[sid], metadata=meta)
    return doc.path or ""


def _submissions(outputs: Any) -> set[str]:
    found = set()
    for o in outputs or ():
        flue = (o.get("metadata") or {}).get("flue") if isinstance(o, Mapping) else None
        if isinstance(flue, Mapping) and isinstance(flue.get("submission_id"), str):
            found.add(flue["submission_id"])
    return found


async def materialize(
    store: Any, conversation_id: str, submission_id: str | None, doc: Document | None
) -> Materialized:
    """Put the state-changing python calls of a run (`submission_id`; None: every one of the
    conversation that no cell recreates yet) into `doc` when it is live; otherwise the result is
    `shown` (the caller may propose its cells, and then marks it `proposed`)."""
    cells: list[tuple[str, dict[str, Any]]] = []
    if doc is not None:
        try:
            cells = [(c.source, dict(c.metadata)) for c in await doc.cells() if c.kind == "code"]
        except DocumentError:
            doc = None
    steps, skipped = steps_to_write(store, conversation_id, submission_id, cells)
    done = Materialized([cell_for(s) for s in steps], skipped=skipped)
    if not steps:
        return done
    if doc is not None and doc.live:
        try:
            done.where = await place_cells(doc, steps)
            done.written = "live"
            return done
        except DocumentError as exc:
            done.skipped.append(f"the live document refused the insert ({exc})")
    done.written = "shown"
    return done
