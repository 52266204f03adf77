"""Running a compaction: the I/O around the pure functions of compaction.py (contract 13)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from flue_nb.runtime.core.compaction import CompactionConfig, compacted_context, file_lists, reserve_tokens, select_cut, format_summary, summary_request
from flue_nb.runtime.errors import ContextOverflowError
from flue_nb.runtime.messages import SummaryMessage
from flue_nb.runtime.providers.model import ModelRequest
from flue_nb.runtime.agent.prompt import compose_system, describe_environment

if TYPE_CHECKING:
    from flue_nb.runtime.core.loop import AgentRun

__all__ = ["compact_window"]


def _config(run: AgentRun) -> CompactionConfig:
    cfg = run.rendered.compaction if run.rendered is not None else None
    return cfg if isinstance(cfg, CompactionConfig) else CompactionConfig()


async def compact_window(run: AgentRun, reason: str) -> bool:
    """Fold the older part of the window into a summary and rebaseline the system prompt.

    Returns False (and changes nothing) when there is nothing old enough to fold.
    """
    assert run.model is not None
    t = run.transcript
    config = _config(run)
    counter = run.settings.tokens()
    before = run.used_tokens()
    counts = counter.count_messages(t.messages)
    cut = select_cut(t.messages, counts, config.keep_recent_tokens)
    if cut == 0 and reason == "threshold":
        return False  # nothing old enough to fold yet: not a compaction, so no events
    run.emit("compaction_start", reason=reason, estimated_tokens=before)
    started = time.perf_counter()
    if cut == 0:
        run.emit("compaction", reason=reason, messages_before=len(t.messages), messages_after=len(t.messages),
                 tokens_before=before, tokens_after=before, duration_ms=0.0, is_error=False, skipped=True)
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
    summarizer = run._resolve(config.model) if config.model is not None else run.model
    request: ModelRequest = summary_request(
        to_fold, previous_summary=previous, files_read=read, files_modified=modified,
        max_tokens=reserve_tokens(summarizer.info, config),
    )
    saved_model = run.model
    run.model = summarizer
    try:
        response = await run._call_model(request)
    except BaseException as exc:
        run.emit("compaction", reason=reason, messages_before=len(t.messages), messages_after=len(t.messages),
                 tokens_before=before, tokens_after=before, duration_ms=round((time.perf_counter() - started) * 1000, 3),
                 is_error=True, error=str(exc))
        raise
    finally:
        run.model = saved_model
    summary = format_summary(response.text, read, modified)
    new_messages = compacted_context(summary, kept)
    # Rebaseline: the prompt is recomposed against the environment as it is now (13.6).
    rendered = run.rendered
    assert rendered is not None
    env = await describe_environment(run.sandbox) if run.sandbox is not None else None
    skills = [*rendered.skills, *(run._workspace_skills or [])] if run.sandbox is not None else list(rendered.skills)
    t.system = compose_system(rendered.instructions, env, skills, rendered.subagents)
    first_kept_seq = t.seqs[cut]
    data: dict[str, Any] = {"summary": summary, "first_kept_seq": first_kept_seq, "reason": reason,
                            "messages_before": len(t.messages), "tokens_before": before}
    run.recorder.append([], extra=[("compaction", data), ("system", {"text": t.system, "roster": t.roster})])
    t.reset(new_messages, [None, *t.seqs[cut:]], [None, *t.sids[cut:]])
    after = run.used_tokens()
    run.emit("compaction", reason=reason, messages_before=len(folded) + len(kept), messages_after=len(new_messages),
             tokens_before=before, tokens_after=after, duration_ms=round((time.perf_counter() - started) * 1000, 3),
             is_error=False)
    return True
