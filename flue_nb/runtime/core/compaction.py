"""The pure half of compaction (contract 13): when to compact, where to cut, what to ask for.

Nothing here does I/O, reads a clock or calls a model. The turn loop measures the context with
`TokenCounter.used_tokens`, asks `should_compact`, folds `messages[:select_cut(...)]` by sending
`summary_request(...)` to the summarisation model, and replaces the context with
`compacted_context(format_summary(...), kept)`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace

from flue_nb.runtime.agent.settings import DEFAULT_KEEP_RECENT_TOKENS, CompactionConfig
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.messages import (
    AssistantMessage,
    Message,
    ProviderPart,
    SignalMessage,
    SummaryMessage,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    UserMessage,
)
from flue_nb.runtime.providers.model import ModelInfo, ModelRequest

__all__ = [
    "DEFAULT_KEEP_RECENT_TOKENS",
    "MAX_RESERVE_TOKENS",
    "SUMMARY_SECTIONS",
    "SUMMARY_SYSTEM_PROMPT",
    "CompactionConfig",
    "compacted_context",
    "file_lists",
    "format_summary",
    "reserve_tokens",
    "select_cut",
    "should_compact",
    "summary_request",
    "threshold",
]

MAX_RESERVE_TOKENS = 20_000
"""The reserve never exceeds this many tokens unless configured (contract 13.1)."""

SUMMARY_SECTIONS = (
    "Goal",
    "Constraints",
    "Progress",
    "Decisions",
    "Next steps",
    "Critical context",
)
"""The headings every summary has, in order (contract 13.6)."""

SUMMARY_SYSTEM_PROMPT = (
    "You compact a coding agent's conversation. The user message holds the older part of the "
    "conversation, which is about to be removed from the agent's context; your summary replaces "
    "it, and the agent continues from the summary plus the most recent messages. Write the "
    "summary for the agent, not for a person, as Markdown with exactly these sections:\n\n"
    "## Goal\nWhat the user wants overall, in their terms.\n\n"
    "## Constraints\nRequirements, preferences and rules the user or the environment set.\n\n"
    "## Progress\nWhat has been done and what the results were.\n\n"
    "## Decisions\nChoices made and why, including approaches that were tried and rejected.\n\n"
    "## Next steps\nWhat remains, in order.\n\n"
    "## Critical context\nExact file paths, function and variable names, commands, identifiers, "
    "numbers and error messages the agent will need. Copy them verbatim; never paraphrase a path "
    "or an error.\n\n"
    "If a previous summary is given, merge it with the new messages into one summary: keep what "
    "still holds, update what changed. Write only the summary, without preamble or tool calls."
)
"""The system prompt of the summarisation request."""

# Tool names whose `path` argument names a file read or changed (contract 2-4).
_READ_TOOLS = frozenset({"read"})
_WRITE_TOOLS = frozenset({"write", "edit"})

# A summary gets the model's whole transcript, but a 50 KB tool output or a written file's
# content would crowd out everything else; their opening is what a summary needs.
_MAX_RESULT_CHARS = 2_000
_MAX_CALL_INPUT_CHARS = 1_000

_READ_TAG = "read-files"
_MODIFIED_TAG = "modified-files"
_FILE_BLOCK = re.compile(r"<(read-files|modified-files)>\n(.*?)</\1>\n?", re.DOTALL)


def reserve_tokens(info: ModelInfo, config: CompactionConfig | None = None) -> int:
    """Tokens kept free below the window (contract 13.1).

    min(20,000, max output tokens) unless configured; when twice that fills the window, a third
    of the window (at least 1,024). The small-window rule also caps a configured reserve, since
    a reserve that large would make every turn compact.
    """
    configured = config.reserve_tokens if config is not None else None
    reserve = configured if configured is not None else min(MAX_RESERVE_TOKENS, info.max_output_tokens)
    if 2 * reserve >= info.context_window:
        reserve = max(1024, info.context_window // 3)
    return reserve


def threshold(info: ModelInfo, config: CompactionConfig | None = None) -> int:
    """The used-token count above which the context is compacted: window - reserve."""
    return info.context_window - reserve_tokens(info, config)


def should_compact(used: int, info: ModelInfo, config: CompactionConfig | None = None) -> bool:
    """True when `used` tokens exceed the threshold (contract 13.1)."""
    return used > threshold(info, config)


def select_cut(messages: Sequence[Message], counts: Sequence[int], keep_recent_tokens: int) -> int:
    """Index of the first kept message; `messages[:cut]` fold into the summary (contract 13.2).

    The kept tail is the shortest suffix holding at least `keep_recent_tokens` tokens (so the
    most recent tokens are all kept verbatim), and at least the last message. The cut moves
    earlier so that no kept tool result loses the assistant message that made its call. 0 means
    there is nothing worth folding: everything fits, or only a previous summary would fold.
    """
    if len(counts) != len(messages):
        raise ConfigError(f"select_cut: {len(counts)} counts for {len(messages)} messages.")
    if keep_recent_tokens <= 0:
        raise ConfigError(f"select_cut: `keep_recent_tokens` must be positive, not {keep_recent_tokens!r}.")
    if not messages:
        return 0
    cut, kept = len(messages) - 1, counts[-1]
    while cut > 0 and kept < keep_recent_tokens:
        cut -= 1
        kept += counts[cut]
    if cut == 0:
        return 0

    caller: dict[str, int] = {}
    for i, m in enumerate(messages):
        if isinstance(m, AssistantMessage):
            for call in m.tool_calls:
                caller[call.id] = i
    # Later results can pull the cut back past earlier ones, so scan from the end; one pass is
    # enough because a call always precedes its results.
    for i in range(len(messages) - 1, -1, -1):
        if i < cut:
            break
        m = messages[i]
        if isinstance(m, ToolResultMessage) and m.call_id in caller:
            cut = min(cut, caller[m.call_id])

    if all(isinstance(m, SummaryMessage) for m in messages[:cut]):
        return 0
    return cut


def file_lists(messages: Sequence[Message]) -> tuple[list[str], list[str]]:
    """Paths read and paths modified by `read`/`write`/`edit` calls (exact, sorted).

    A file both read and modified is listed as modified only. Calls whose result is an error are
    ignored. Lists carried by an earlier summary (see `format_summary`) are included, so they
    accumulate across compactions.
    """
    failed = {m.call_id for m in messages if isinstance(m, ToolResultMessage) and m.is_error}
    read: set[str] = set()
    modified: set[str] = set()
    for m in messages:
        if isinstance(m, SummaryMessage):
            for tag, body in _FILE_BLOCK.findall(m.text):
                paths = {line for line in body.splitlines() if line}
                (read if tag == _READ_TAG else modified).update(paths)
        elif isinstance(m, AssistantMessage):
            for call in m.tool_calls:
                path = call.input.get("path")
                if not isinstance(path, str) or not path or call.id in failed:
                    continue
                if call.name in _READ_TOOLS:
                    read.add(path)
                elif call.name in _WRITE_TOOLS:
                    modified.add(path)
    return sorted(read - modified), sorted(modified)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[… {len(text) - limit} more characters not shown]"


def _serialise(message: Message) -> str:
    if isinstance(message, UserMessage):
        # Images fold to one line each: the summariser never receives their bytes.
        return "\n".join([f"[User]\n{message.text}", *(p.describe() for p in message.images)])
    if isinstance(message, AssistantMessage):
        pieces = []
        for part in message.parts:
            if isinstance(part, TextPart):
                pieces.append(f"[Assistant]\n{part.text}")
            elif isinstance(part, ThinkingPart):
                pieces.append(f"[Assistant thinking]\n{part.thinking}")
            elif isinstance(part, ProviderPart):
                block = _clip(json.dumps(part.block, ensure_ascii=False, default=str), _MAX_CALL_INPUT_CHARS)
                pieces.append(f"[Assistant {part.block_type} block] {block}")
            else:
                args = _clip(json.dumps(part.input, ensure_ascii=False, default=str), _MAX_CALL_INPUT_CHARS)
                pieces.append(f"[Assistant tool call {part.id}] {part.name}({args})")
        if message.aborted:
            pieces.append("[Assistant response was cut off]")
        return "\n".join(pieces)
    if isinstance(message, ToolResultMessage):
        label = "Tool error" if message.is_error else "Tool result"
        content = _clip(message.content, _MAX_RESULT_CHARS)
        images = "".join(f"\n{p.describe()}" for p in message.images)
        return f"[{label} {message.call_id} from {message.name}]\n{content}{images}"
    if isinstance(message, SignalMessage):
        return f"[Runtime notice]\n{message.render()}"
    return f"[Earlier summary]\n{message.text}"


def summary_request(
    folded: Sequence[Message],
    *,
    previous_summary: str | None = None,
    files_read: Sequence[str] = (),
    files_modified: Sequence[str] = (),
    max_tokens: int | None = None,
) -> ModelRequest:
    """The model call that summarises `folded` (purpose `"compaction"`, no tools).

    The messages travel as text inside one user message, so the summariser cannot mistake them
    for its own turn or try to call their tools. `max_tokens` bounds the summary (the reserve is
    a sensible budget).
    """
    transcript = "\n\n".join(_serialise(m) for m in folded)
    blocks = [f"<conversation>\n{transcript}\n</conversation>"]
    if previous_summary:
        blocks.append(f"<previous-summary>\n{previous_summary}\n</previous-summary>")
    if files_read or files_modified:
        blocks.append(
            "Files touched so far (keep these exact paths in Critical context):\n"
            + _file_blocks(files_read, files_modified).strip()
        )
    headings = ", ".join(SUMMARY_SECTIONS)
    blocks.append(f"Write the summary now, with the sections {headings}.")
    return ModelRequest(
        system=SUMMARY_SYSTEM_PROMPT,
        messages=[UserMessage("\n\n".join(blocks))],
        tools=[],
        max_tokens=max_tokens,
        purpose="compaction",
    )


def _file_blocks(files_read: Sequence[str], files_modified: Sequence[str]) -> str:
    out = ""
    for tag, paths in ((_READ_TAG, files_read), (_MODIFIED_TAG, files_modified)):
        if paths:
            body = "".join(f"{p}\n" for p in paths)
            out += f"\n\n<{tag}>\n{body}</{tag}>"
    return out


def format_summary(model_text: str, files_read: Sequence[str], files_modified: Sequence[str]) -> str:
    """The stored summary: the model's text plus the exact file lists, whatever the model wrote.

    File-list blocks the model copied into its text are removed first so the lists appear once;
    `file_lists` reads them back at the next compaction.
    """
    text = _FILE_BLOCK.sub("", model_text).strip()
    return text + _file_blocks(files_read, files_modified)


def compacted_context(summary_text: str, kept: Sequence[Message]) -> list[Message]:
    """The context after compaction: the summary, then the kept messages (contract 13.6).

    Kept assistant messages are copied without their `usage`: it measured the longer context
    before the fold, and `TokenCounter.used_tokens` would otherwise trust it and compact again.
    Rebuild a context from the store with this function too, for the same reason.
    """
    out: list[Message] = [SummaryMessage(summary_text)]
    for m in kept:
        out.append(replace(m, usage=None) if isinstance(m, AssistantMessage) and m.usage is not None else m)
    return out
