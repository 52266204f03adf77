"""What a `%flue` cell shows without the widget: a transcript as `text/plain` and `text/markdown`.

`CellView` folds the runtime's events for one submission into streamed text plus one line per
tool call, signal and compaction. Its text holds nothing that changes between runs (no ids,
times or durations), so nbval can compare a re-run; those go in the output's metadata instead
(`metadata["flue"]`: conversation and submission ids, token totals, the tool trace).
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from flue_nb.notebook.views._notebook_calls import Shown, result_lines
from flue_nb.notebook.views.changes import ChangesPanel
from flue_nb.notebook.views.figures import Figure, figure_line
from flue_nb.notebook.views.fold import Fold, call_line
from flue_nb.notebook.views.parts import (
    CompactionPart,
    NotePart,
    Part,
    SignalPart,
    TaskPart,
    TextPart,
    ToolPart,
    UserPart,
)
from flue_nb.notebook.views.static import Block, blocks_markdown, literal_markdown
from flue_nb.runtime import events as ev
from flue_nb.runtime.events import ErrorInfo, Event
from flue_nb.runtime.messages import Usage
from flue_nb.runtime.providers import Spend
from flue_nb.runtime.providers.model import PRICES_AS_OF
from flue_nb.runtime.tools.summary import Summaries, one_line

__all__ = ["CellView", "Status", "TextView", "call_line"]

Status = Literal["queued", "running", "completed", "failed", "aborted"]

_ARG_CHARS = 60
_UNSHOWN = (ev.SubmissionQueued, ev.ThinkingDelta)
"""Events the fold keeps that the transcript does not draw: they must not cause an update."""
_MARK = {"completed": "✓ completed", "failed": "✗ failed", "aborted": "■ aborted"}


def share_of(tokens: dict[str, int]) -> float | None:
    """Share of a token tally's prompt tokens read from cache (None before any prompt)."""
    # Low when something (a timestamp in the system prompt, a reordered tool list) changes the
    # prompt's prefix from one call to the next.
    share = Usage(tokens.get("input", 0), 0, tokens.get("cache_read", 0), tokens.get("cache_write", 0)).cache_share
    return None if share is None else round(share, 4)


def cache_text(share: float | None) -> str:
    """`87 % of prompt tokens read from cache`, or "" before any prompt."""
    return "" if share is None else f"{share:.0%} of prompt tokens read from cache".replace("%", " %")


def cost_text(cost_usd: float | None, unpriced: int = 0, *, short: bool = False) -> str:
    """An estimate at list prices, said as one (`≈ $0.0123 at list prices of ...`), or ""."""
    if cost_usd is None:
        return ""  # no response of a priced model (offline ones have no price): nothing to say
    amount = f"${cost_usd:.4f}" if cost_usd < 1 else f"${cost_usd:,.2f}"
    if short:
        return f"≈ {amount}"
    more = f", {unpriced} response{'s' if unpriced != 1 else ''} of unpriced models not counted" if unpriced else ""
    return f"≈ {amount} at list prices of {PRICES_AS_OF}{more}"


class CellView:
    """The live transcript of one submission, rendered as plain text and markdown.

    The events are folded by `views.fold.Fold` (the chat widget's fold); this class keeps the
    cell's outcome and renders the fold's top-level parts one line each.
    """

    def __init__(
        self,
        message: str,
        conversation_id: str,
        agent: str = "",
        submission_id: str | None = None,
        summaries: Summaries | None = None,
    ) -> None:
        """`summaries`: how the agent's tools sum a call up (`Session.summaries`)."""
        self.message = message
        self.conversation_id = conversation_id
        self.agent = agent
        self.submission_id = submission_id
        self.status: Status = "queued"
        self.error = ""
        self.notes: dict[str, Any] = {}
        """Extra provenance for the cell's metadata (set by the magic)."""
        self.reply: str | None = None
        """The final answer of a completed submission (`_.reply` after a blocking cell)."""
        self.changes: ChangesPanel | None = None
        """What the settled run changed (set by the magic when it finishes), shown before the footer."""
        self._lock = threading.Lock()
        self._fold = Fold(only=submission_id or "", summaries=summaries)
        self._fold.on_other = self._other
        self._recovering: set[str] = set()
        self._recovered: set[str] = set()

    @property
    def tokens(self) -> dict[str, int]:
        """Token totals of this cell's own model calls (its subagents' not counted), added up
        from their `TurnEnd` events."""
        u = self._fold.usage
        if self.submission_id is not None and self.status not in ("queued", "running"):
            return {**u, "total": sum(u.values())}  # settled: every key, as its metadata always held
        return {"total": sum(u.values()), **u} if any(u.values()) else {}

    @property
    def tokens_unreported(self) -> bool:
        """No tokens counted because the server reported none for this cell's model calls."""
        return not sum(self._fold.usage.values()) and self._fold.unreported > 0

    @property
    def response_models(self) -> list[str]:
        """Who answered, in order of first response: `claude-...` (Anthropic), `openai/<id>`,
        `azure/<id>`, `bedrock/<id>`, `vertex/<id>`, `<host>/<id>` (a compatible server)."""
        return list(self._fold.models)

    @property
    def spend(self) -> Spend:
        """What this cell's responses (its subagents' included) cost at list prices."""
        return self._fold.spend

    @property
    def _parts(self) -> list[Part]:
        return self._fold.block(None).parts

    # --- folding events ---------------------------------------------------------------------

    def note(self, text: str) -> None:
        """Add a line of its own (a recovery notice, a lease wait, a hint)."""
        with self._lock:
            self._parts.append(NotePart(text))

    def recovery(
        self, sid: str, outcome: str | None = None, *, result: str | None = None, error: ErrorInfo | None = None
    ) -> None:
        """Show work an earlier kernel left, which this cell's conversation picks up first.

        Called from the store (its events may have gone by before this cell watched); the
        answer, or why it failed, is shown once whichever path saw the settlement first.
        """
        with self._lock:
            self._recovering_note(sid)
            if outcome is not None and self._recovered_note(sid, outcome):
                self._recovered_answer(sid, outcome, result, error)

    def _recovered_answer(self, sid: str, outcome: str, result: str | None, error: ErrorInfo | None) -> None:
        if sid == self._fold.following:
            return  # this cell's message joined that run: its answer streamed in already
        if outcome == "completed" and result:
            # Its own part: this cell's answer, streamed next, must not run on from it.
            self._parts.append(TextPart(chunks=[result], recovered=True))
        elif error is not None:
            self._parts.append(NotePart(f"  {error.type}: {one_line(error.message, 120)}"))

    def _recovering_note(self, sid: str) -> bool:
        if sid in self._recovering or sid in self._recovered:
            return False
        self._recovering.add(sid)
        self._parts.append(NotePart(f"↻ recovering submission {sid} (interrupted)"))
        return True

    def _recovered_note(self, sid: str, outcome: str) -> bool:
        if sid not in self._recovering:
            return False
        self._recovering.discard(sid)
        self._recovered.add(sid)
        self._parts.append(NotePart(f"↻ recovered submission {sid}: settled {outcome}"))
        return True

    def apply(self, event: Event) -> bool:
        """Fold one event in; True when what the cell shows changed."""
        with self._lock:
            if self.submission_id is not None and self._fold.only != self.submission_id:
                self._fold.bind(self.submission_id)
            if isinstance(event, ev.TextDelta) and event.task_id is None and self._after_recovered():
                self._fold._streaming.pop(None, None)  # this cell's answer starts a part of its own
            changed = self._fold.apply(event) and not isinstance(event, _UNSHOWN)
            if isinstance(event, ev.SubmissionRunning) and event.submission_id == self.submission_id:
                self.status = "running"
            elif isinstance(event, ev.SubmissionSettled) and event.submission_id == self.submission_id:
                self.status = event.outcome
                failed = event.error is not None and event.outcome != "completed"
                self.error = event.error.message if failed and event.error is not None else ""
                if event.outcome == "completed":
                    self.reply = event.result
            return changed

    def _after_recovered(self) -> bool:
        last = self._parts[-1] if self._parts else None
        return isinstance(last, TextPart) and last.recovered

    def _other(self, event: Event) -> bool:
        # Another submission of this conversation: the recovery this cell waits on.
        sid = event.submission_id or ""
        if isinstance(event, ev.SubmissionRecovery):
            return self._recovering_note(sid)
        if isinstance(event, ev.SubmissionSettled) and self._recovered_note(sid, event.outcome):
            self._recovered_answer(sid, event.outcome, event.result, event.error)
            return True
        return False

    def settle(self, status: Status, error: str = "") -> None:
        """Record the outcome (when it was learnt other than from the event stream)."""
        with self._lock:
            self.status, self.error = status, error

    # --- rendering ---------------------------------------------------------------------------

    def _lines(self) -> list[tuple[str, str]]:
        """(kind, text) per line: `text` for answers, `note` and `tool` for the rest."""
        out: list[tuple[str, str]] = []
        for p in self._parts:
            out.extend(_part_lines(p, self._fold.summaries))
        return out

    def text_plain(self) -> str:
        """The transcript as plain text (what CI logs and nbconvert show)."""
        with self._lock:
            out = [text for _, text in self._lines()]
            if self.changes:
                out.append(self.changes.text_plain())
            out.append(self._footer())
        return "\n".join(s for s in out if s)

    def _footer(self) -> str:
        if self.status in ("queued", "running"):
            return f"[{self.status}…]"
        mark = _MARK.get(self.status, self.status)
        return f"[{mark}: {self.error}]" if self.error else f"[{mark}]"

    def markdown(self) -> str:
        """The transcript as markdown (what JupyterLab, VS Code and GitHub render); figures named."""
        return blocks_markdown(self.static_blocks())

    def static_blocks(self) -> list[Block]:
        """The markdown blocks, with each tool call's figures after its line (a static copy draws them)."""
        with self._lock:
            blocks: list[Block] = []
            for p in self._parts:
                if isinstance(p, ToolPart):
                    blocks.extend(_tool_markdown(p, self._fold.summaries))
                    blocks.extend(Figure.of(i, self._fold.images.get(i.digest)) for i in p.images)
                else:
                    blocks.extend(
                        text if kind == "text" else f"> {text}" for kind, text in _part_lines(p, self._fold.summaries)
                    )
            if self.changes:
                blocks.append(self.changes)
            blocks.append(f"*{self._footer()}*")
        return [b for b in blocks if b]

    def metadata(self) -> dict[str, Any]:
        """Provenance for the cell output: ids, outcome, token totals, the tool trace."""
        with self._lock:
            trace = [
                {
                    "name": t.name,
                    "ok": _ok(t),
                    "duration_ms": t.duration_ms,
                    **({"error": _error(t)} if _error(t) else {}),
                }
                for t in self._parts
                if isinstance(t, ToolPart)
            ]
            spend = self._fold.spend
            return {
                "conversation_id": self.conversation_id,
                "submission_id": self.submission_id,
                "agent": self.agent,
                "status": self.status,
                "tokens": self.tokens,
                "cost_usd": round(spend.usd, 6) if spend.usd is not None else None,
                "cost": cost_text(spend.usd, spend.unpriced),
                "cache_share": share_of(self.tokens),
                "response_models": self.response_models,
                "tools": trace,
                **self.notes,
            }

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        return (
            {"text/plain": self.text_plain(), "text/markdown": self.markdown()},
            {"flue": self.metadata()},
        )

    def __repr__(self) -> str:
        return self.text_plain()


def _ok(t: ToolPart) -> bool | None:
    return None if t.status in ("running", "awaiting_approval") else t.status == "ok"


def _error(t: ToolPart) -> str:
    return one_line(t.result or t.status, 80) if _ok(t) is False else ""


def _summary(t: ToolPart, summaries: Summaries) -> str:
    if t.task is not None:
        return one_line(f"{t.task.agent}: {t.task.description}", _ARG_CHARS)
    return call_line(t.name, t.input, summaries, _ARG_CHARS)


def _shown(t: ToolPart) -> Shown | None:
    """What a notebook tool shows under its line (the cell's source, what reached the notebook)."""
    ok = _ok(t)
    return None if ok is None else result_lines(t.name, t.input, t.details, ok)


def _preview(t: ToolPart, shown: Shown | None) -> str:
    if not _ok(t) or not t.result or shown is not None or t.name == "cells":
        return ""  # for a notebook tool the lines below (or, for `cells`, the line alone) say it
    return one_line(t.result, _ARG_CHARS)


def _tool_line(t: ToolPart, summaries: Summaries) -> str:
    ok, shown = _ok(t), _shown(t)
    mark = "…" if ok is None else ("✓" if ok else f"✗ {_error(t)}")
    preview = _preview(t, shown)
    line = f"· {t.name}: {_summary(t, summaries)} {mark}{f' → {preview}' if preview else ''}".replace(":  ", ": ")
    body = [f"    | {c}" for c in shown.code.splitlines()] + [f"    {x}" for x in shown.lines] if shown else []
    body += [f"    {figure_line(Figure.of(i))}" for i in t.images]
    return "\n".join([line, *body])


def _tool_markdown(t: ToolPart, summaries: Summaries) -> list[str]:
    ok, shown = _ok(t), _shown(t)
    mark = "…" if ok is None else ("✓" if ok else f"✗ {_md_escape(_error(t))}")
    summary = _summary(t, summaries)
    arg = f" `{summary.replace('`', 'ˋ')}`" if summary else ""
    result = _preview(t, shown)
    preview = f" → `{result.replace('`', 'ˋ')}`" if result else ""
    out = [f"> ▸ **{t.name}**{arg} {mark}{preview}"]
    if shown is not None:
        if shown.code:
            out.append(f"```{shown.lang}\n" + shown.code.replace("```", "ˋˋˋ") + "\n```")
        out.extend(f"> {_md_escape(x)}" for x in shown.lines)
    return out


def _compaction_lines(p: CompactionPart) -> list[tuple[str, str]]:
    started = ("note", f"· compacting the context ({p.reason})…")
    if p.running:
        return [started]
    if p.is_error:
        return [started, ("note", f"· compaction failed: {one_line(p.error or '', 80)}")]
    if p.skipped:
        return [started, ("note", "· compaction: nothing old enough to fold")]
    before, after = p.tokens_before or 0, p.tokens_after or 0
    done = f"· compacted: {before:,} → {after:,} tokens ({p.messages_before} → {p.messages_after} messages)"
    return [started, ("note", done)]


def _task_lines(p: TaskPart) -> list[tuple[str, str]]:
    out = [("note", f"· task → {p.agent}: {one_line(p.description)}")]
    if p.status == "error":
        out.append(("note", f"· task ← {p.agent}: ✗ {one_line(p.error or '', 80)}"))
    elif p.status == "ok":
        out.append(("note", f"· task ← {p.agent}: {one_line(p.text or '')}"))
    return out


def _part_lines(p: Part, summaries: Summaries) -> list[tuple[str, str]]:
    """A top-level part as transcript lines (thinking and joined messages are the widget's)."""
    if isinstance(p, TextPart):
        return [("text", p.text.strip("\n").rstrip())] if p.kind == "text" else []
    if isinstance(p, ToolPart):
        return [("tool", _tool_line(p, summaries))]
    if isinstance(p, SignalPart):
        what = "; ".join(c.replace("`", "") for c in p.changes)
        return [("note", f"· signal ({p.signal_type}): {what}" if what else f"· signal ({p.signal_type})")]
    if isinstance(p, CompactionPart):
        return _compaction_lines(p)
    if isinstance(p, TaskPart):
        return _task_lines(p)
    if isinstance(p, NotePart):
        return [("note", f"· {p.text}" if p.log else p.text)]
    assert isinstance(p, UserPart)
    return []


def _md_escape(text: str) -> str:
    return literal_markdown(text)


class TextView:
    """A block of text shown as `text/plain` and as markdown (status, history, help).

    `blocks`: the markdown as blocks with figures in place, for a static copy to draw them.
    """

    def __init__(
        self,
        plain: str,
        markdown: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        blocks: list[Block] | None = None,
    ) -> None:
        self.plain = plain
        self.md = markdown if markdown is not None else plain
        self.meta = metadata or {}
        self.blocks = blocks

    def static_blocks(self) -> list[Block] | None:
        """The markdown's blocks with figures in place, when the view has them."""
        return self.blocks

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        return {"text/plain": self.plain, "text/markdown": self.md}, ({"flue": self.meta} if self.meta else {})

    def __repr__(self) -> str:
        return self.plain
