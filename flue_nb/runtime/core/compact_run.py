"""Running a compaction: the I/O around the pure functions of compaction.py (contract 13).

It receives everything it needs from the run that asks for it (the window, the models, a way to
call one, a way to recompose the system prompt, the recorder and the event callback), so it
knows nothing of the loop.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from flue_nb.runtime import events as ev
from flue_nb.runtime.core.compaction import (
    CompactionConfig,
    compacted_context,
    file_lists,
    format_summary,
    reserve_tokens,
    select_cut,
    summary_request,
)
from flue_nb.runtime.core.transcript import Recorder, Transcript
from flue_nb.runtime.errors import ContextOverflowError
from flue_nb.runtime.events import CompactionReason, Emit
from flue_nb.runtime.messages import AssistantMessage, Message, SummaryMessage, ToolResultMessage
from flue_nb.runtime.providers.model import Model, ModelRequest
from flue_nb.runtime.redact import redact

__all__ = ["FOLDED_RESULT_CHARS", "CompactionJob", "compact_window", "fold_results"]

FOLDED_RESULT_CHARS = 2_000
"""Characters of a kept tool result left after an overflow folds it."""


def fold_results(messages: Sequence[Message]) -> list[Message] | None:
    """`messages` with every tool result over `FOLDED_RESULT_CHARS` cut to its opening and a note
    (in the window only; the store keeps the whole result). None when none was that long."""
    out: list[Message] = []
    changed = False
    for m in messages:
        if isinstance(m, ToolResultMessage) and len(m.content) > FOLDED_RESULT_CHARS:
            note = (
                f"\n[… {len(m.content) - FOLDED_RESULT_CHARS:,} more characters folded when the context "
                "overflowed; call the tool again for the part you need]"
            )
            m = replace(m, content=m.content[:FOLDED_RESULT_CHARS] + note)
            changed = True
        out.append(m)
    return out if changed else None


@dataclass(slots=True)
class CompactionJob:
    """What one compaction needs from the run that asks for it."""

    transcript: Transcript
    model: Model
    config: CompactionConfig
    counter: Any
    """The conversation's `TokenCounter`."""
    call_model: Callable[[ModelRequest, Model], Awaitable[AssistantMessage]]
    """A quiet model call (retries included) whose text is never shown as the answer."""
    resolve: Callable[[Any], Model]
    recompose: Callable[[], Awaitable[str]]
    """The system prompt composed against the environment as it is now (the rebaseline)."""
    recorder: Recorder
    emit: Emit


def _used(job: CompactionJob) -> int:
    return int(job.counter.used_tokens(job.transcript.messages, system=job.transcript.system or ""))


async def compact_window(job: CompactionJob, reason: CompactionReason) -> bool:
    """Fold the older part of the window into a summary and rebaseline the system prompt.

    Returns False (and changes nothing) when there is nothing old enough to fold.
    """
    t, config = job.transcript, job.config
    before = _used(job)
    counts = job.counter.count_messages(t.messages)
    cut = select_cut(t.messages, counts, config.keep_recent_tokens)
    if cut == 0 and reason == "threshold":
        return False  # nothing old enough to fold yet: not a compaction, so no events
    job.emit(ev.CompactionStart(reason=reason, estimated_tokens=before))
    started = time.perf_counter()

    def ended(**fields: Any) -> None:
        job.emit(
            ev.CompactionEnd(
                reason=reason,
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
                tokens_before=before,
                **fields,
            )
        )

    if cut == 0 and reason == "overflow":
        # Nothing old to fold, but the recent part may hold large tool results (a batch of
        # them): fold those, or every later request overflows again (issue 20.1).
        shrunk = fold_results(t.messages)
        if shrunk is not None:
            t.reset(shrunk, list(t.seqs), list(t.sids))
            after = _used(job)
            ended(messages_before=len(t.messages), messages_after=len(t.messages), tokens_after=after)
            return True
    if cut == 0:
        ended(messages_before=len(t.messages), messages_after=len(t.messages), tokens_after=before, skipped=True)
        if reason == "overflow":
            raise ContextOverflowError(
                "the context is too long for the model and nothing older than the most recent "
                f"{config.keep_recent_tokens} tokens can be folded; lower keep_recent_tokens or start a new conversation"
            )
        return False
    folded, kept = t.messages[:cut], t.messages[cut:]
    previous = folded[0].text if isinstance(folded[0], SummaryMessage) else None
    to_fold = folded[1:] if previous is not None else folded
    read, modified = file_lists(folded)
    summarizer = job.resolve(config.model) if config.model is not None else job.model
    request = summary_request(
        to_fold,
        previous_summary=previous,
        files_read=read,
        files_modified=modified,
        max_tokens=reserve_tokens(summarizer.info, config),
    )
    try:
        response = await job.call_model(request, summarizer)
    except BaseException as exc:
        ended(
            messages_before=len(t.messages),
            messages_after=len(t.messages),
            tokens_after=before,
            is_error=True,
            error=str(exc),
        )
        raise
    # The summariser may repeat a secret the folded messages held (a user typed it, a tool
    # decoded one): the summary is stored and shown, and every later request carries it.
    summary = redact(format_summary(response.text, read, modified))
    new_messages = compacted_context(summary, kept)
    if reason == "overflow":
        # The kept part is what the provider refused with the rest: its large results fold too.
        new_messages = fold_results(new_messages) or new_messages
    system = await job.recompose()
    after = int(job.counter.used_tokens(new_messages, system=system))
    data: dict[str, Any] = {
        "summary": summary,
        "first_kept_seq": t.seqs[cut],
        "reason": reason,
        "messages_before": len(t.messages),
        "messages_after": len(new_messages),
        "tokens_before": before,
        "tokens_after": after,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
    }
    job.recorder.append([], extra=[("compaction", data), ("system", {"text": system, "roster": t.roster})])
    t.system = system
    t.reset(new_messages, [None, *t.seqs[cut:]], [None, *t.sids[cut:]])
    job.emit(
        ev.CompactionEnd(
            reason=reason,
            messages_before=data["messages_before"],
            messages_after=len(new_messages),
            duration_ms=data["duration_ms"],
            tokens_before=before,
            tokens_after=after,
            summary=summary,
        )
    )
    return True
