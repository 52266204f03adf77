"""`%flue history` and `%flue status` as text: a conversation rebuilt from what the store holds.

Like the cell transcript, the history text holds no ids or times, so a notebook that shows it
re-runs to the same output.
"""

from __future__ import annotations

import re
from typing import Any

from flue_nb.notebook.view.transcript import TextView, cache_text, call_line, cost_text
from flue_nb.runtime.messages import (
    AssistantMessage,
    Message,
    SignalMessage,
    ToolResultMessage,
    UserMessage,
)
from flue_nb.runtime.session import SessionStatus, StoredConversation

__all__ = ["from_store", "history_view", "status_view"]


def history_view(conversation_id: str, messages: list[Message]) -> TextView:
    """The conversation as text: who said what, one line per tool call with its outcome."""
    results = {m.call_id: m for m in messages if isinstance(m, ToolResultMessage)}
    plain: list[str] = []
    md: list[str] = []
    for m in messages:
        if isinstance(m, UserMessage):
            plain.append(f"user: {m.text.strip()}")
            md.append(_said("user", _keep_lines(m.text.strip())))
            _images(m.images, plain, md)
        elif isinstance(m, AssistantMessage):
            if m.text.strip():
                plain.append(f"assistant: {m.text.strip()}")
                md.append(_said("assistant", m.text.strip()))
            for call in m.tool_calls:
                res = results.get(call.id)
                mark = "…" if res is None else ("✗" if res.is_error else "✓")
                summary = call_line(call.name, call.input)
                plain.append(f"  · {call.name}: {summary} {mark}")
                md.append(f"> ▸ **{call.name}** `{summary.replace('`', 'ˋ')}` {mark}")
            for call in m.tool_calls:
                if call.id in results:
                    _images(results[call.id].images, plain, md)
            if m.aborted:
                plain.append("  (response cut off)")
                md.append("> *(response cut off)*")
        elif isinstance(m, SignalMessage):
            what = "; ".join(c.replace("`", "") for c in m.changes)
            line = f"signal ({m.signal_type})" + (f": {what}" if what else "")
            plain.append(f"  · {line}")
            md.append(f"> {line}")
        elif not isinstance(m, ToolResultMessage):
            plain.append("  · (summary of earlier messages)")
            md.append("> *(summary of earlier messages)*")
    if not plain:
        plain, md = ["(no messages yet)"], ["*(no messages yet)*"]
    return TextView(
        "\n".join(plain),
        "\n\n".join(md),
        {"conversation_id": conversation_id, "messages": len(messages)},
    )


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


def _images(images: list[Any], plain: list[str], md: list[str]) -> None:
    """Redraw a message's images: their one-line description, and in markdown the image itself
    when its bytes were loaded from the store."""
    import base64

    for p in images:
        plain.append(f"    {p.describe()}")
        if p.data is None:
            md.append(f"> {p.describe()}")
        else:
            data = base64.b64encode(p.data).decode("ascii")
            md.append(f"![{p.label or 'image'}](data:{p.media_type};base64,{data})")


def status_view(status: SessionStatus, *, store: str, model: str = "") -> TextView:
    """Where the conversation stands, one fact per line.

    `model` is the configured model setting, shown when the conversation has not answered yet.
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
        f"tokens: {u.input_tokens:,} in, {u.output_tokens:,} out, {u.cache_read_tokens:,} cache read, "
        f"{u.cache_write_tokens:,} cache write",
        f"submissions: {outcomes}",
    ]
    if cost := cost_text(status.cost_usd, status.unpriced_responses):
        lines.insert(-1, f"cost: {cost}")
    if cache := cache_text(u.cache_share):
        lines.insert(-1, f"cache: {cache}")
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


def from_store(name: str, stored: StoredConversation, *, store_label: str) -> Any:
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
