"""`%flue history` and `%flue status` as text: a conversation rebuilt from what the store holds.

Like the cell transcript, the history text holds no ids or times, so a notebook that shows it
re-runs to the same output.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from flue_nb.notebook.views.figures import Blobs, Figure, figure_line, figure_markdown
from flue_nb.notebook.views.static import Block, blocks_markdown
from flue_nb.notebook.views.transcript import TextView, cache_text, call_line, cost_text
from flue_nb.runtime.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    SignalMessage,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from flue_nb.runtime.session import SessionStatus, StoredConversation
from flue_nb.runtime.tools.summary import Summaries

__all__ = ["earlier_note", "from_store", "history_view", "status_view"]


def history_view(
    conversation_id: str,
    messages: list[Message],
    *,
    embed: bool = True,
    blobs: Blobs | None = None,
    summaries: Summaries | None = None,
    note: str = "",
) -> TextView:
    """The conversation as text: who said what, one line per tool call with its outcome, and
    under a call the figures it drew (named in the text; in the markdown embedded when `embed`,
    from the messages' loaded bytes or `blobs`, else named too); each call summed up as the
    agent's tools do (`summaries`, a session's), else by its first text argument. `note` comes
    first (what a bounded view left out)."""
    summaries = summaries if summaries is not None else Summaries()
    results = _results(messages)
    plain: list[str] = [note] if note else []
    blocks: list[Block] = [f"*{note}*"] if note else []
    for m in messages:
        if isinstance(m, UserMessage):
            plain.append(f"user: {m.text.strip()}")
            blocks.append(_said("user", _keep_lines(m.text.strip())))
            _figures(m.images, plain, blocks)
        elif isinstance(m, AssistantMessage):
            if m.text.strip():
                plain.append(f"assistant: {m.text.strip()}")
                blocks.append(_said("assistant", m.text.strip()))
            for call in m.tool_calls:
                res = results.get((id(m), call.id))
                mark = "…" if res is None else ("✗" if res.is_error else "✓")
                summary = call_line(call.name, call.input, summaries)
                plain.append(f"  · {call.name}: {summary} {mark}")
                arg = f" `{summary.replace('`', 'ˋ')}`" if summary else ""
                blocks.append(f"> ▸ **{call.name}**{arg} {mark}")
                if res is not None:
                    _figures(res.images, plain, blocks)
            if m.aborted:
                plain.append("  (response cut off)")
                blocks.append("> *(response cut off)*")
        elif isinstance(m, SignalMessage):
            what = "; ".join(c.replace("`", "") for c in m.changes)
            line = f"signal ({m.signal_type})" + (f": {what}" if what else "")
            plain.append(f"  · {line}")
            blocks.append(f"> {line}")
        elif not isinstance(m, ToolResultMessage):
            plain.append("  · (summary of earlier messages)")
            blocks.append("> *(summary of earlier messages)*")
    if not plain:
        plain, blocks = ["(no messages yet)"], ["*(no messages yet)*"]
    md = blocks_markdown(blocks, (lambda f: figure_markdown(f, blobs)) if embed else None)
    meta = {"conversation_id": conversation_id, "messages": len(messages)}
    return TextView("\n".join(plain), md, meta, blocks=blocks)


def _results(messages: list[Message]) -> dict[tuple[int, str], ToolResultMessage]:
    """Each call's result, by (its assistant message, call id): call ids repeat in a conversation
    (a restarted kernel's offline model, servers that reuse them); a result answers the calls of
    the last assistant message before it."""
    found: dict[tuple[int, str], ToolResultMessage] = {}
    asking: AssistantMessage | None = None
    for m in messages:
        if isinstance(m, AssistantMessage):
            asking = m
        elif isinstance(m, ToolResultMessage) and asking is not None:
            found.setdefault((id(asking), m.call_id), m)
    return found


def earlier_note(left_out: int, how: str) -> str:
    """The line saying how many earlier submissions a bounded view left out, and how to see them."""
    return f"({left_out:,} earlier submission{'s' if left_out != 1 else ''} not shown; {how})"


_BLOCK = re.compile(r"(#{1,6}\s|[-*+]\s|>|```|~~~|\||\d+[.)]\s)")
"""How a markdown block (heading, list, quote, fence, table) starts: it cannot follow a label inline."""


def _said(who: str, text: str) -> str:
    """`**who:** text`; a text of several lines (or one starting with a heading, list, quote or
    code) goes on its own lines, so its markdown renders as markdown (issue 19.8)."""
    if "\n" not in text and not _BLOCK.match(text):
        return f"**{who}:** {text}"
    return f"**{who}:**\n\n{text}"


def _keep_lines(text: str) -> str:
    """A person's message keeps its line breaks: markdown would join its lines into one."""
    return "  \n".join(line.rstrip() for line in text.split("\n"))


def _figures(images: list[ImagePart], plain: list[str], blocks: list[Block]) -> None:
    """A message's images in its place: named in the text, a figure among the blocks."""
    for p in images:
        figure = Figure.of(p)
        plain.append(f"    {figure_line(figure)}")
        blocks.append(figure)


def status_view(
    status: SessionStatus, *, store: str, model: str = "", sandbox: str = "", extra: Sequence[str] = ()
) -> TextView:
    """Where the conversation stands, one fact per line.

    `model` is the configured model setting, shown when the conversation has not answered yet;
    `sandbox` says where the default assistant's commands run (empty: not shown); `extra` lines
    (approval rules, grants, the hub policy) come last.
    """
    if status.used_tokens is not None and status.context_window:
        context = f"{status.used_tokens:,} / {status.context_window:,} tokens"
        if status.compaction_threshold is not None:
            context += f" (compacts above {status.compaction_threshold:,})"
    elif status.used_tokens is not None:
        context = f"{status.used_tokens:,} tokens at the last response"
    else:
        context = "nothing measured yet (no response)"
    used_model = status.model or (f"{model} (configured; no response yet)" if model else "none yet")
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(status.outcomes.items()) if n) or "none"
    u = status.usage
    owner = "this kernel" if status.owned_here else (status.owner or "none (idle)")
    lines = [
        f"conversation: {status.conversation_id}",
        f"agent: {status.agent}",
        f"model: {used_model}",
        f"store: {store}",
        f"running: {', '.join(status.running) or 'nothing'}",
        f"queued: {len(status.queued)}",
        f"owner: {owner}",
        f"context: {context}",
        tokens_line(u, status.unreported_responses),
        f"submissions: {outcomes}",
    ]
    if sandbox:
        lines.insert(4, f"sandbox: {sandbox}")
    if cost := cost_text(status.cost_usd, status.unpriced_responses):
        lines.insert(-1, f"cost: {cost}")
    if cache := cache_text(u.cache_share):
        lines.insert(-1, f"cache: {cache}")
    lines.extend(extra)
    meta = {
        "conversation_id": status.conversation_id,
        "agent": status.agent,
        "model": status.model,
        "used_tokens": status.used_tokens,
        "outcomes": dict(status.outcomes),
        "cost_usd": status.cost_usd,
        "cache_share": u.cache_share,
    }
    return TextView("\n".join(lines), "\n".join(f"- {ln}" for ln in lines), meta)


def from_store(name: str, stored: StoredConversation, *, store_label: str) -> TextView | str:
    """`status` or `abort` straight from a store, with no agent (none configured).

    Opening a session would start recovering interrupted work with whatever agent opened it;
    looking must not do that.
    """
    if name == "abort":
        ids = stored.abort()
        return f"flue: recorded an abort for {len(ids)} submission(s)" + (
            f": {', '.join(ids)}" if ids else " (nothing was running)"
        )
    return status_view(stored.status(agent="none chosen in this kernel"), store=store_label)


def tokens_line(u: Usage, unreported: int) -> str:
    """The status's token line; a server that reports no usage is said so, not shown as 0."""
    if unreported and not u.total:
        return "tokens: not reported by the model server"
    reasoning = f" ({u.reasoning_tokens:,} of them reasoning)" if u.reasoning_tokens else ""
    line = (
        f"tokens: {u.input_tokens:,} in, {u.output_tokens:,} out{reasoning}, {u.cache_read_tokens:,} cache read, "
        f"{u.cache_write_tokens:,} cache write"
    )
    return line + (f" ({unreported:,} responses did not report theirs)" if unreported else "")
