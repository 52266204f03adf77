"""`%flue history` and `%flue status` as text: a conversation rebuilt from what the store holds.

Like the cell transcript, the history text holds no ids or times, so a notebook that shows it
re-runs to the same output.
"""

from __future__ import annotations

from typing import Any

from flue_nb.runtime.messages import (
    AssistantMessage,
    Message,
    SignalMessage,
    ToolResultMessage,
    UserMessage,
    message_from_dict,
)

from flue_nb.notebook.display import TextView, summarize_call

__all__ = ["from_store", "history_view", "status_view", "usage_totals"]


def history_view(conversation_id: str, messages: list[Message]) -> TextView:
    """The conversation as text: who said what, one line per tool call with its outcome."""
    results = {m.call_id: m for m in messages if isinstance(m, ToolResultMessage)}
    plain: list[str] = []
    md: list[str] = []
    for m in messages:
        if isinstance(m, UserMessage):
            plain.append(f"user: {m.text.strip()}")
            md.append(f"**user:** {m.text.strip()}")
            _images(m.images, plain, md)
        elif isinstance(m, AssistantMessage):
            if m.text.strip():
                plain.append(f"assistant: {m.text.strip()}")
                md.append(f"**assistant:** {m.text.strip()}")
            for call in m.tool_calls:
                res = results.get(call.id)
                mark = "…" if res is None else ("✗" if res.is_error else "✓")
                summary = summarize_call(call.name, call.input)
                plain.append(f"  · {call.name}: {summary} {mark}")
                md.append(f"> 🔧 **{call.name}** `{summary.replace('`', 'ˋ')}` {mark}")
            for call in m.tool_calls:
                if call.id in results:
                    _images(results[call.id].images, plain, md)
            if m.aborted:
                plain.append("  (response cut off)")
                md.append("> *(response cut off)*")
        elif isinstance(m, SignalMessage):
            plain.append(f"  · signal: {m.signal_type}")
            md.append(f"> signal: {m.signal_type}")
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


def usage_totals(records: list[Any]) -> dict[str, int]:
    """Token totals of the assistant messages among store records (provider-reported usage)."""
    names = ("input", "output", "cache_read", "cache_write")
    totals = dict.fromkeys(names, 0)
    for r in records:
        usage = r.data.get("usage") if r.data.get("kind") == "assistant" else None
        for name, value in zip(names, usage or ()):
            totals[name] += int(value or 0)
    totals["total"] = sum(totals[n] for n in names)
    return totals


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


def status_view(
    status: dict[str, Any], *, store: str, model: str, submissions: list[Any]
) -> TextView:
    """Where the conversation stands, one fact per line."""
    counts: dict[str, int] = {}
    for sub in submissions:
        key = sub.outcome.value if sub.outcome is not None else sub.state.value
        counts[key] = counts.get(key, 0) + 1
    used, window = status.get("used_tokens"), status.get("context_window")
    context = (
        f"{used} / {window} tokens"
        if used is not None and window
        else "not measured yet (no run in this kernel)"
    )
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if n) or "none"
    lines = [
        f"conversation: {status['conversation_id']}",
        f"agent: {status['agent']}" + (f" (model {model})" if model else ""),
        f"store: {store}",
        f"running: {', '.join(status['running']) or 'nothing'}",
        f"queued: {len(status['queued'])}",
        f"owner: {status.get('owner') or 'none (idle)'}",
        f"context: {context}",
        f"submissions: {outcomes}",
    ]
    return TextView("\n".join(lines), "\n".join(f"- {ln}" for ln in lines), dict(status))


def from_store(name: str, store: Any, conversation_id: str, *, store_label: str) -> Any:
    """`history`, `status` or `abort` straight from a store, with no agent (none configured).

    Opening a session would start recovering interrupted work with whatever agent opened it;
    looking must not do that.
    """
    if name == "history":
        records = store.records(conversation_id, kinds=["message"])
        return history_view(conversation_id, [message_from_dict(r.data) for r in records])
    if name == "abort":
        ids = store.request_abort(conversation_id)
        return f"flue: recorded an abort for {len(ids)} submission(s)" + (
            f": {', '.join(ids)}" if ids else " (nothing was running)"
        )
    subs = store.submissions(conversation_id)
    lease = store.lease(conversation_id)
    unsettled = [s for s in subs if s.state.value != "settled"]
    status = {
        "conversation_id": conversation_id,
        "agent": "none chosen in this kernel",
        "running": [s.id for s in unsettled if s.state.value == "running"],
        "queued": [s.id for s in unsettled if s.state.value in ("queued", "joining")],
        "owner": lease[0] if lease else None,
    }
    return status_view(status, store=store_label, model="", submissions=subs)
