"""What `verify` found, as one value: the rerun's failing and differing cells, the agent's hidden
steps, what could not be compared, and (for `%flue verify`) how the live namespace differs, each
difference with its origin. It goes to JSON (from `flue-nb verify --json` to `%flue verify`)
and to the text a person reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flue_nb.notebook.verify.digest import VarDiff, VarSummary
from flue_nb.notebook.verify.steps import AgentStep
from flue_nb.runtime.facts import NamespaceDiff

__all__ = ["CellProblem", "Report"]


@dataclass(frozen=True, slots=True)
class CellProblem:
    """A cell that fails in the rerun, or whose outputs differ from the saved ones."""

    index: int
    """The cell's position in the notebook, from 0 (said from 1, as a person counts cells)."""
    first_line: str
    why: str


@dataclass(slots=True)
class Report:
    """The outcome of one `verify`."""

    notebook: str
    failing: list[CellProblem] = field(default_factory=list)
    differing: list[CellProblem] = field(default_factory=list)
    hidden: list[AgentStep] = field(default_factory=list)
    """State-changing agent steps of the notebook's conversations that no cell recreates."""
    not_compared: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Cells edited since they ran, cells run out of order: causes, not failures by themselves."""
    stopped: str | None = None
    """Where the rerun stopped early (the total timeout, a dead kernel), if it did."""
    fresh: dict[str, VarSummary] | None = None
    """The rerun's namespace, summed up (None when the rerun did not get that far)."""
    live: list[tuple[VarDiff, list[str]]] = field(default_factory=list)
    """`%flue verify`: each difference from the live namespace with its origins."""
    compared_live: bool = False

    @property
    def reproduces(self) -> bool:
        """True when the notebook reruns and reproduces (what cannot be compared does not count)."""
        return not (self.failing or self.differing or self.hidden or self.stopped or self.live)

    def text(self) -> str:
        """The report as lines a person reads, verdict first."""
        lines = [self._verdict()]
        if self.stopped:
            lines.append(f"- {self.stopped}")
        lines += [
            f"- cell {p.index + 1} fails when the notebook reruns: {p.why} ({p.first_line!r})" for p in self.failing
        ]
        lines += [f"- cell {p.index + 1}'s outputs differ from the saved ones: {p.why}" for p in self.differing]
        for diff, origins in self.live:
            lines.append(f"- {diff.text()}: {'; '.join(origins)}")
        for step in self.hidden:
            lines.append(
                f"- {step.where()} {step.what()}, in no cell (`%flue materialize` writes it into the notebook)"
            )
        lines += [f"- {n}" for n in self.notes]
        if self.not_compared:
            lines.append("Not compared (listed, not failed):")
            lines += [f"  - {n}" for n in self.not_compared]
        return "\n".join(lines)

    def _verdict(self) -> str:
        if self.reproduces:
            live = " and matches the live namespace" if self.compared_live else ""
            return f"flue verify: {self.notebook} reruns top to bottom and reproduces{live}."
        return f"flue verify: {self.notebook} does not reproduce:"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the live comparison is made where the live kernel is, so it is left out)."""
        return {
            "notebook": self.notebook,
            "reproduces": self.reproduces,
            "failing": [[p.index, p.first_line, p.why] for p in self.failing],
            "differing": [[p.index, p.first_line, p.why] for p in self.differing],
            "hidden": [_step_dict(s) for s in self.hidden],
            "not_compared": self.not_compared,
            "notes": self.notes,
            "stopped": self.stopped,
            "fresh": None if self.fresh is None else {k: v.to_dict() for k, v in self.fresh.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """Read back `to_dict`."""
        fresh = data.get("fresh")
        return cls(
            str(data["notebook"]),
            [CellProblem(int(i), str(a), str(b)) for i, a, b in data.get("failing", [])],
            [CellProblem(int(i), str(a), str(b)) for i, a, b in data.get("differing", [])],
            [_step_from(s) for s in data.get("hidden", [])],
            list(data.get("not_compared", [])),
            list(data.get("notes", [])),
            data.get("stopped"),
            None if fresh is None else {k: VarSummary.from_dict(v) for k, v in fresh.items()},
        )


def _step_dict(s: AgentStep) -> dict[str, Any]:
    return {
        "conversation_id": s.conversation_id, "submission_id": s.submission_id, "step": s.step,
        "call_id": s.call_id, "tool": s.tool, "code": s.code, "variables": s.diff.to_dict(),
        "failed": s.failed, "summary": s.summary,
    }  # fmt: skip


def _step_from(d: dict[str, Any]) -> AgentStep:
    diff = NamespaceDiff.from_dict(d.get("variables")) or NamespaceDiff()
    return AgentStep(
        d["conversation_id"], d["submission_id"], int(d["step"]), d["call_id"], d["tool"], d["code"], diff,
        bool(d.get("failed")), str(d.get("summary", "")),
    )  # fmt: skip
