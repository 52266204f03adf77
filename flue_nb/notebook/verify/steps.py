"""The agent's steps a notebook's conversations recorded that changed kernel state, read from the
store: each `python` call whose result named variables it created, changed or deleted (its
`NamespaceDiff`, kept in the result's `details["variables"]`), and each `run_cell` that ran
code given as `source` (it ran in the kernel, in no cell of the document).

A step is numbered as `%flue changes` numbers it: from 1 within its submission, every tool
result counted in the order it was recorded. Reading never writes to the store.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from flue_nb.runtime.facts import NamespaceDiff, split_details
from flue_nb.runtime.messages import AssistantMessage, ToolCall, ToolResultMessage, message_from_dict

__all__ = ["AgentStep", "agent_steps", "recreated_by"]


@dataclass(frozen=True, slots=True)
class AgentStep:
    """One recorded tool call that changed (or may have changed) the kernel's namespace."""

    conversation_id: str
    submission_id: str
    step: int
    """The call's number within its submission, from 1."""
    call_id: str
    tool: str
    """`python` or `run_cell`."""
    code: str
    diff: NamespaceDiff
    """What the call reported (empty for a `run_cell` recorded before it reported names)."""
    failed: bool = False
    summary: str = field(default="")
    """The first line of its result (what it printed or raised)."""
    at: float = 0.0
    """When its result was recorded (`time.time()`)."""

    @property
    def names(self) -> tuple[str, ...]:
        """Every name the step created, changed or deleted."""
        return (*self.diff.added, *self.diff.changed, *self.diff.removed)

    def what(self) -> str:
        """`created `x`; changed `df``, or `ran code in the kernel` for a `run_cell`."""
        parts = []
        for label, names in (
            ("created", self.diff.added),
            ("changed", self.diff.changed),
            ("deleted", self.diff.removed),
        ):
            if names:
                parts.append(f"{label} " + ", ".join(f"`{n}`" for n in names))
        return "; ".join(parts) or "ran code in the kernel"

    def where(self) -> str:
        """`the agent's python call in conversation X, step 7`."""
        return f"the agent's {self.tool} call in conversation `{self.conversation_id}`, step {self.step} ({self.submission_id})"


def agent_steps(
    store: Any, conversation_ids: Iterable[str], submission_ids: Iterable[str] | None = None
) -> list[AgentStep]:
    """The state-changing steps of these conversations (of these submissions only, when given),
    in the order they ran; read-only `python` calls (no name changed) are left out."""
    wanted = set(submission_ids) if submission_ids is not None else None
    out: list[AgentStep] = []
    for cid in dict.fromkeys(conversation_ids):
        calls: dict[str, tuple[str, int, ToolCall]] = {}
        numbers: dict[str, int] = {}
        for record in store.records(cid, kinds=["message"]):
            sid = record.submission_id
            if sid is None or (wanted is not None and sid not in wanted):
                continue
            message = message_from_dict(record.data)
            if isinstance(message, AssistantMessage):
                for part in message.parts:
                    if isinstance(part, ToolCall):
                        calls[part.id] = (sid, 0, part)
            elif isinstance(message, ToolResultMessage):
                # Numbered as `%flue changes` numbers them (runtime/undo.changes): every result of
                # the submission, in the order it was recorded, so a STEP means one thing in both.
                numbers[sid] = numbers.get(sid, 0) + 1
                if message.call_id not in calls:
                    continue
                sid, _, call = calls[message.call_id]
                step = _step(cid, sid, numbers[sid], call, message, record.created_at)
                if step is not None:
                    out.append(step)
    return sorted(out, key=lambda s: s.at)


def _step(cid: str, sid: str, number: int, call: ToolCall, result: ToolResultMessage, at: float) -> AgentStep | None:
    first = (result.content.strip().splitlines() or [""])[0][:120]
    if call.name == "python":
        diff = result.namespace or split_details(result.details)[2]
        code = call.input.get("code")
        if diff is None or not (diff.added or diff.changed or diff.removed) or not isinstance(code, str):
            return None
        return AgentStep(cid, sid, number, call.id, "python", code, diff, result.is_error, first, at)
    if call.name == "run_cell" and isinstance(call.input.get("source"), str) and not call.input.get("id"):
        # Recorded since issue 34.1: the names its code changed (older records have none).
        diff = result.namespace or split_details(result.details)[2] or NamespaceDiff()
        return AgentStep(cid, sid, number, call.id, "run_cell", call.input["source"], diff, result.is_error, first, at)
    return None


def recreated_by(step: AgentStep, cells: Iterable[tuple[str, dict[str, Any]]]) -> bool:
    """Whether a cell of the notebook recreates the step: one marked with its tool call
    (`metadata["flue"]["tool_call_id"]`, as `materialize` writes it), or one whose code holds it."""
    code = _lines(step.code)
    for source, metadata in cells:
        flue = metadata.get("flue") if isinstance(metadata, dict) else None
        if isinstance(flue, dict) and flue.get("tool_call_id") == step.call_id:
            return True
        lines = _lines(source)
        if code and any(lines[i : i + len(code)] == code for i in range(len(lines) - len(code) + 1)):
            return True
    return False


def _lines(source: str) -> list[str]:
    """Code lines, stripped, blank lines and comments left out: the step's code must be whole
    lines of the cell (code quoted in a string, as in a scripted model's script, does not count)."""
    return [ln.strip() for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#")]
