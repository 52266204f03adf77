"""What a `%flue` cell shows without the widget: a transcript as `text/plain` and `text/markdown`.

`CellView` folds the runtime's events for one submission into streamed text plus one line per
tool call, signal and compaction. Its text holds nothing that changes between runs (no ids,
times or durations), so nbval can compare a re-run; those go in the output's metadata instead
(`metadata["flue"]`: conversation and submission ids, token totals, the tool trace).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from flue_nb.notebook.cells.view import Shown, call_summary, result_lines
from flue_nb.runtime.events import (
    CompactionEnd,
    CompactionStart,
    ErrorInfo,
    Event,
    Log,
    MessageEnd,
    Signal,
    SubmissionRecovery,
    SubmissionRunning,
    SubmissionSettled,
    TaskEnd,
    TaskStart,
    TextDelta,
    ToolEnd,
    ToolStart,
    TurnEnd,
)
from flue_nb.runtime.messages import Usage
from flue_nb.runtime.providers import Spend
from flue_nb.runtime.providers.model import PRICES_AS_OF

__all__ = ["CellView", "Status", "TextView", "summarize_call"]

Status = Literal["queued", "running", "completed", "failed", "aborted"]

# What a tool line shows of a call's input: the argument that says what it does.
_KEY_ARG = {
    "bash": "command", "read": "path", "write": "path", "edit": "path", "grep": "pattern",
    "glob": "pattern", "python": "code", "task": "description",
}  # fmt: skip
_ARG_CHARS = 60
_MARK = {"completed": "✓ completed", "failed": "✗ failed", "aborted": "■ aborted"}


def _one_line(text: str, limit: int = _ARG_CHARS) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    more = len(lines) > 1
    if len(first) > limit:
        first, more = first[: limit - 1], True
    return first + ("…" if more else "")


def summarize_call(name: str, input: dict[str, Any] | None) -> str:
    """A short, stable one-line summary of a tool call's input."""
    input = input or {}
    notebook = call_summary(name, input)
    if notebook is not None:
        return notebook
    key = _KEY_ARG.get(name)
    value = input.get(key) if key else None
    if value is None:
        value = next((v for v in input.values() if isinstance(v, str)), "")
    return _one_line(value)


@dataclass(slots=True)
class _Tool:
    call_id: str
    name: str
    summary: str
    ok: bool | None = None
    """None while running."""
    error: str = ""
    preview: str = ""
    """The first line of the result, so a log shows what the agent saw."""
    duration_ms: float | None = None
    shown: Shown | None = None
    """What a notebook tool shows under its line (the cell's source, what reached the notebook)."""
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _Line:
    kind: Literal["text", "tool", "note"]
    note: str = ""
    tool: _Tool | None = None
    chunks: list[str] = field(default_factory=list)
    """Streamed text as it arrived (joined when rendered: appending stays cheap)."""
    recovered: bool = False
    """The answer of a recovered submission (an earlier kernel's), not this cell's."""

    @property
    def text(self) -> str:
        if self.kind == "note":
            return self.note
        if len(self.chunks) > 1:
            self.chunks[:] = ["".join(self.chunks)]
        return self.chunks[0] if self.chunks else ""


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


@dataclass
class CellView:
    """The live transcript of one submission, rendered as plain text and markdown."""

    message: str
    conversation_id: str
    agent: str = ""
    submission_id: str | None = None
    status: Status = "queued"
    error: str = ""
    lines: list[_Line] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=dict)
    spend: Spend = field(default_factory=Spend)
    """What this cell's responses (its subagents' included) cost at list prices."""
    response_models: list[str] = field(default_factory=list)
    """Who answered, in order of first response: `claude-...` (Anthropic), `openai/<id>`,
    `azure/<id>`, `bedrock/<id>`, `vertex/<id>`, `<host>/<id>` (a compatible server)."""
    notes: dict[str, Any] = field(default_factory=dict)
    reply: str | None = None
    """The final answer of a completed submission (`_.reply` after a blocking cell)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _tools: dict[str, _Tool] = field(default_factory=dict, repr=False)
    _recovering: set[str] = field(default_factory=set, repr=False)
    _recovered: set[str] = field(default_factory=set, repr=False)
    _following: str | None = field(default=None, repr=False)
    """The response this cell's message joined, whose events this cell shows from then on."""

    # --- folding events ---------------------------------------------------------------------

    def note(self, text: str) -> None:
        """Add a line of its own (a recovery notice, a lease wait, a hint)."""
        with self._lock:
            self.lines.append(_Line("note", text))

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
                self._recovered_answer(outcome, result, error)

    def _recovered_answer(self, outcome: str, result: str | None, error: ErrorInfo | None) -> None:
        if outcome == "completed" and result:
            # Its own line: this cell's answer, streamed next, must not run on from it.
            self.lines.append(_Line("text", chunks=[result], recovered=True))
        elif error is not None:
            self.lines.append(_Line("note", f"  {error.type}: {_one_line(error.message, 120)}"))

    def _recovering_note(self, sid: str) -> bool:
        if sid in self._recovering or sid in self._recovered:
            return False
        self._recovering.add(sid)
        self.lines.append(_Line("note", f"↻ recovering submission {sid} (interrupted)"))
        return True

    def _recovered_note(self, sid: str, outcome: str) -> bool:
        if sid not in self._recovering:
            return False
        self._recovering.discard(sid)
        self._recovered.add(sid)
        self.lines.append(_Line("note", f"↻ recovered submission {sid}: settled {outcome}"))
        return True

    def apply(self, event: Event) -> bool:
        """Fold one event in; True when what the cell shows changed."""
        with self._lock:
            if event.submission_id != self.submission_id:
                return self._other(event)
            return self._own(event)

    def _other(self, event: Event) -> bool:
        # Another submission of this conversation: recovery this cell waited on, and the response
        # this cell's message joined (from the join on, its events are this cell's too).
        sid = event.submission_id or ""
        if sid == self._following:
            return self._own(event)
        match event:
            case SubmissionRecovery():
                return self._recovering_note(sid)
            case SubmissionSettled(outcome=outcome, result=result, error=error):
                if not self._recovered_note(sid, outcome):
                    return False
                self._recovered_answer(outcome, result, error)
                return True
            case MessageEnd(role="user", from_submission_id=origin) if origin == self.submission_id:
                self._following = sid
                self.lines.append(_Line("note", "↪ joined the response that was already running"))
                return True
        return False

    def _own(self, event: Event) -> bool:
        match event:
            case SubmissionRunning():
                self.status = "running"
                return True
            case TextDelta(task_id=None, delta=delta):
                if self.lines and self.lines[-1].kind == "text" and not self.lines[-1].recovered:
                    self.lines[-1].chunks.append(delta)
                else:
                    self.lines.append(_Line("text", chunks=[delta]))
                return True
            case ToolStart(call_id=call_id, name=name, input=args, task_id=None):
                tool = _Tool(call_id, name, summarize_call(name, dict(args)), input=dict(args))
                self._tools[call_id] = tool
                self.lines.append(_Line("tool", tool=tool))
                return True
            case ToolEnd(call_id=call_id, is_error=is_error, content=content, duration_ms=ms, task_id=None):
                ended = self._tools.get(call_id)
                if ended is None:
                    return False
                tool = ended
                tool.ok = not is_error
                tool.error = "" if tool.ok else _one_line(content, 80)
                tool.preview = _one_line(content) if tool.ok else ""
                tool.duration_ms = ms
                tool.shown = result_lines(tool.name, tool.input, event.details, tool.ok)
                if tool.shown is not None or tool.name == "cells":
                    tool.preview = ""  # the lines below (or, for `cells`, the line alone) say it
                return True
            case Signal(signal_type=kind, changes=changes):
                what = "; ".join(c.replace("`", "") for c in changes)
                self.lines.append(_Line("note", f"· signal ({kind}): {what}" if what else f"· signal ({kind})"))
                return True
            case CompactionStart(reason=reason):
                self.lines.append(_Line("note", f"· compacting the context ({reason})…"))
                return True
            case CompactionEnd(is_error=True, error=error):
                self.lines.append(_Line("note", f"· compaction failed: {_one_line(error or '', 80)}"))
                return True
            case CompactionEnd(skipped=True):
                self.lines.append(_Line("note", "· compaction: nothing old enough to fold"))
                return True
            case CompactionEnd(tokens_before=before, tokens_after=after, messages_before=mb, messages_after=ma):
                self.lines.append(_Line("note", f"· compacted: {before:,} → {after:,} tokens ({mb} → {ma} messages)"))
                return True
            case TaskStart(agent=agent, description=description, task_id=task_id):
                card = self._tools.get(task_id or "")
                if card is not None:  # this cell's own `task` call: its line names the subagent
                    card.summary = _one_line(f"{agent}: {description or ''}")
                    return True
                self.lines.append(_Line("note", f"· task → {agent}: {_one_line(description or '')}"))
                return True
            case TaskEnd(task_id=task_id) if task_id in self._tools:
                return False  # the `task` call's line shows the answer when the call ends
            case TaskEnd(agent=agent, is_error=True, error=error):
                self.lines.append(_Line("note", f"· task ← {agent}: ✗ {_one_line(error or '', 80)}"))
                return True
            case TaskEnd(agent=agent, text=text):
                self.lines.append(_Line("note", f"· task ← {agent}: {_one_line(text or '')}"))
                return True
            case TurnEnd(usage=usage, model=model, task_id=task_id) if usage is not None:
                # Tokens are the cell's own agent's; the cost also counts its subagents' calls.
                if task_id is None:
                    for key, value in (("total", usage.total), ("input", usage.input_tokens),
                                       ("output", usage.output_tokens), ("cache_read", usage.cache_read_tokens),
                                       ("cache_write", usage.cache_write_tokens)):  # fmt: skip
                        self.tokens[key] = self.tokens.get(key, 0) + value
                self.spend.add(model, usage)
                if model and model not in self.response_models:
                    self.response_models.append(model)
                return False
            case Log(kind="retry" | "budget", message=message):
                self.lines.append(_Line("note", f"· {message}"))
                return True
            case SubmissionSettled(outcome=outcome, error=error):
                if event.submission_id != self.submission_id:
                    return False  # the response this cell joined settled; ours follows
                self.status = outcome
                self.error = error.message if error is not None and outcome != "completed" else ""
                return True
        return False

    def settle(self, status: Status, error: str = "") -> None:
        """Record the outcome (when it was learnt other than from the event stream)."""
        with self._lock:
            self.status, self.error = status, error

    # --- rendering ---------------------------------------------------------------------------

    def text_plain(self) -> str:
        """The transcript as plain text (what CI logs and nbconvert show)."""
        with self._lock:
            out = [self._line_plain(ln) for ln in self.lines]
            out.append(self._footer())
        return "\n".join(s for s in out if s)

    def _line_plain(self, ln: _Line) -> str:
        if ln.kind == "text":
            return ln.text.strip("\n").rstrip()
        if ln.kind == "note":
            return ln.text
        t = ln.tool
        assert t is not None
        mark = "…" if t.ok is None else ("✓" if t.ok else f"✗ {t.error}")
        preview = f" → {t.preview}" if t.preview else ""
        line = f"· {t.name}: {t.summary} {mark}{preview}".replace(":  ", ": ")
        if t.shown is None:
            return line
        body = [f"    | {c}" for c in t.shown.code.splitlines()] + [f"    {x}" for x in t.shown.lines]
        return "\n".join([line, *body])

    def _footer(self) -> str:
        if self.status in ("queued", "running"):
            return f"[{self.status}…]"
        mark = _MARK.get(self.status, self.status)
        return f"[{mark}: {self.error}]" if self.error else f"[{mark}]"

    def markdown(self) -> str:
        """The transcript as markdown (what JupyterLab, VS Code and GitHub render)."""
        with self._lock:
            parts = []
            for ln in self.lines:
                if ln.kind == "text":
                    parts.append(ln.text.strip("\n").rstrip())
                elif ln.kind == "note":
                    parts.append(f"> {ln.text}")
                else:
                    t = ln.tool
                    assert t is not None
                    err = f"✗ {_md_escape(t.error)}"
                    mark = "…" if t.ok is None else ("✓" if t.ok else err)
                    summary = f" `{t.summary.replace('`', 'ˋ')}`" if t.summary else ""
                    preview = f" → `{t.preview.replace('`', 'ˋ')}`" if t.preview else ""
                    parts.append(f"> ▸ **{t.name}**{summary} {mark}{preview}")
                    if t.shown is not None:
                        if t.shown.code:
                            parts.append("```python\n" + t.shown.code.replace("```", "ˋˋˋ") + "\n```")
                        parts.extend(f"> {_md_escape(x)}" for x in t.shown.lines)
            parts.append(f"*{self._footer()}*")
        return "\n\n".join(p for p in parts if p)

    def metadata(self) -> dict[str, Any]:
        """Provenance for the cell output: ids, outcome, token totals, the tool trace."""
        with self._lock:
            trace = [
                {
                    "name": t.name,
                    "ok": t.ok,
                    "duration_ms": t.duration_ms,
                    **({"error": t.error} if t.error else {}),
                }
                for t in self._tools.values()
            ]
            return {
                "conversation_id": self.conversation_id,
                "submission_id": self.submission_id,
                "agent": self.agent,
                "status": self.status,
                "tokens": dict(self.tokens),
                "cost_usd": round(self.spend.usd, 6) if self.spend.usd is not None else None,
                "cost": cost_text(self.spend.usd, self.spend.unpriced),
                "cache_share": share_of(self.tokens),
                "response_models": list(self.response_models),
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


def _md_escape(text: str) -> str:
    return text.replace("*", "\\*").replace("_", "\\_")


class TextView:
    """A block of text shown as `text/plain` and as markdown (status, history, help)."""

    def __init__(self, plain: str, markdown: str | None = None, metadata: dict[str, Any] | None = None) -> None:
        self.plain = plain
        self.md = markdown if markdown is not None else plain
        self.meta = metadata or {}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        return {"text/plain": self.plain, "text/markdown": self.md}, ({"flue": self.meta} if self.meta else {})

    def __repr__(self) -> str:
        return self.plain
