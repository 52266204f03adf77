"""An eval run's report: each case's verdict, answer, reason, tokens, dollars, duration, tool
calls and error; the run's score; the summary table and the JSON form."""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CaseResult", "EvalReport"]


@dataclass
class CaseResult:
    """One case of a run."""

    id: str
    status: str
    """`passed`, `failed`, `error` (the agent or kernel failed), or `not_run` (the budget ran out first)."""
    passed: bool | None
    """True when every check passed and nothing failed; None for a case not run."""
    score: float | None = None
    """The share of the case's checks that passed (None: not run, or no checks)."""
    answer: str = ""
    reason: str = ""
    error: str | None = None
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    duration: float = 0.0
    tool_calls: int = 0
    conversation: str | None = None
    prompt: str = ""
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each check's name: {"value": bool or number, "reason": str}."""
    resumed: bool = False
    """True when the case finished in an earlier attempt of the run and was not run again."""


@dataclass
class EvalReport:
    """A run of a dataset against a model (and agent)."""

    run_id: str
    dataset: str
    model: str
    agent: str | None
    db: str
    cases: list[CaseResult]
    stopped: str | None = None
    """Why the run stopped before every case ran (the budget), or None."""
    max_cost: float | None = None
    pydantic_report: Any = field(default=None, repr=False, compare=False)
    """pydantic-evals' `EvaluationReport` of the cases that ran (its `.print()` renders its table)."""

    @property
    def score(self) -> float:
        """Cases passed over all cases (a case not run counts as not passed)."""
        return sum(c.passed is True for c in self.cases) / len(self.cases) if self.cases else 0.0

    def count(self, status: str) -> int:
        """How many cases ended with `status`."""
        return sum(c.status == status for c in self.cases)

    @property
    def cost_usd(self) -> float:
        """Dollars at list prices over every case (an earlier attempt's, for resumed ones)."""
        return sum(c.cost_usd for c in self.cases)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report: `score`, the counts, and `cases` (each with `id`, `passed`, `answer`,
        `reason`, `cost_usd`, `input_tokens`, `output_tokens`, `error`, and more)."""
        return {
            "run_id": self.run_id,
            "dataset": self.dataset,
            "model": self.model,
            "agent": self.agent,
            "db": self.db,
            "score": self.score,
            "passed": self.count("passed"),
            "failed": self.count("failed"),
            "errors": self.count("error"),
            "not_run": self.count("not_run"),
            "cost_usd": self.cost_usd,
            "input_tokens": sum(c.input_tokens for c in self.cases),
            "output_tokens": sum(c.output_tokens for c in self.cases),
            "max_cost": self.max_cost,
            "stopped": self.stopped,
            "cases": [asdict(c) for c in self.cases],
        }

    def to_json(self) -> str:
        """`to_dict()` as JSON text."""
        return json.dumps(self.to_dict(), indent=2, default=str)

    def _rows(self) -> list[list[str]]:
        rows = []
        for c in self.cases:
            mark = {"passed": "✓", "failed": "✗", "error": "error", "not_run": "not run"}[c.status]
            rows.append(
                [
                    c.id,
                    mark,
                    "" if c.score is None else f"{c.score:.2f}",
                    _clip(c.answer.strip().splitlines()[-1] if c.answer.strip() else "", 36),
                    f"{c.input_tokens:,}/{c.output_tokens:,}",
                    f"${c.cost_usd:.4f}",
                    f"{c.duration:5.1f}s" + (" (resumed)" if c.resumed else ""),
                    str(c.tool_calls),
                    _clip(c.error or c.reason, 60),
                ]
            )
        return rows

    HEADER = ["case", "result", "score", "answer (last line)", "tokens in/out", "cost", "time", "tools", "reason"]

    def summary(self) -> str:
        """One line: the score and the counts."""
        parts = [f"score {self.score:.2f} ({self.count('passed')}/{len(self.cases)} passed"]
        for status, word in (("failed", "failed"), ("error", "errors"), ("not_run", "not run")):
            if self.count(status):
                parts.append(f"{self.count(status)} {word}")
        line = ", ".join(parts) + f"); ${self.cost_usd:.4f}"
        if self.stopped:
            line += f"; stopped: {self.stopped}"
        return line

    def table(self) -> str:
        """The summary table as text, then the score line."""
        rows = [self.HEADER, *self._rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.HEADER))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join([*lines, "", self.summary()])

    def open_hint(self, case: CaseResult) -> str:
        """How to open a case's conversation."""
        return f"%flue chat -c {case.conversation} --db {self.db}   (or: flue-nb history --db {self.db} {case.conversation})"

    def details(self, case_id: str) -> str:
        """One case in full, as text: prompt, answer, each check, the error, how to open it."""
        case = next((c for c in self.cases if c.id == case_id), None)
        if case is None:
            raise KeyError(case_id)
        lines = [f"case {case.id}: {case.status}" + (f" (score {case.score:.2f})" if case.score is not None else "")]
        lines += ["", "prompt:", _indent(case.prompt), "", "answer:", _indent(case.answer or "(none)")]
        if case.checks:
            lines += ["", "checks:"]
            lines += [f"  {name}: {c['value']} — {c['reason']}" for name, c in case.checks.items()]
        if case.error:
            lines += ["", f"error: {case.error}"]
        lines += [
            "",
            f"tokens {case.input_tokens:,} in / {case.output_tokens:,} out, ${case.cost_usd:.4f}, "
            f"{case.duration:.1f} s, {case.tool_calls} tool call(s)",
        ]
        if case.conversation:
            lines.append(f"open it: {self.open_hint(case)}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The table, and under it one drill-down per case (`<details>`)."""
        head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in self.HEADER)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(v)}</td>" for v in row) + "</tr>"
            for row in self._rows()
        )
        drill = "".join(
            f"<details><summary>{html.escape(c.id)}: {html.escape(c.status)}</summary>"
            f"<pre>{html.escape(self.details(c.id))}</pre></details>"
            for c in self.cases
        )
        return (
            f"<p><b>{html.escape(self.dataset)}</b> with <code>{html.escape(self.model)}</code>: "
            f"{html.escape(self.summary())}</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{drill}"
        )

    def __repr__(self) -> str:
        return f"EvalReport({self.dataset!r}, {self.summary()})"


def _clip(text: str, n: int) -> str:
    t = " ".join(str(text).split())
    return t if len(t) <= n else t[: n - 1] + "…"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in str(text).splitlines()) or "  "
