"""The typed parts one fold of the event stream makes: what every view of a conversation draws.

`views.fold.Fold` builds them from the runtime's events; `views.transcript` renders them as text
and markdown, `chat.wire` as the chat widget's JSON. A part is a dataclass with a `kind` tag.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from flue_nb.runtime.facts import ApprovalFacts, NamespaceDiff

__all__ = [
    "RESULT_CHARS",
    "Block",
    "BlockState",
    "Clip",
    "CompactionPart",
    "ImageRef",
    "NotePart",
    "Part",
    "SignalPart",
    "TaskPart",
    "TextPart",
    "ToolPart",
    "ToolStatus",
    "UserPart",
    "clip",
]

RESULT_CHARS = 4000
"""How much of a tool result (or its input) a view receives; the card gives the full size."""

BlockState = Literal["queued", "joining", "running", "joined", "settled"]
ToolStatus = Literal["running", "awaiting_approval", "ok", "error", "denied", "aborted", "failed"]


@dataclass(slots=True)
class Clip:
    """The start of a long value plus its full size: what a card shows of it."""

    text: str
    bytes: int
    lines: int
    clipped: bool


def clip(text: str, limit: int = RESULT_CHARS) -> Clip:
    """`text` cut to `limit` characters, with the size of the whole."""
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return Clip(text[:limit], len(text.encode("utf-8", "replace")), lines, len(text) > limit)


@dataclass(slots=True)
class ImageRef:
    """An image a tool result carries; its bytes are found by `digest` (the store's blob key)."""

    digest: str
    media_type: str
    width: int
    height: int
    label: str = ""


@dataclass(slots=True)
class TextPart:
    """Streamed answer text or thinking; chunks are joined only when a view reads `text`."""

    kind: Literal["text", "thinking"] = "text"
    chunks: list[str] = field(default_factory=list)
    recovered: bool = False
    """The answer of a recovered submission (written by an earlier kernel), not streamed here."""

    @property
    def text(self) -> str:
        """The whole text so far (joining the chunks once)."""
        if len(self.chunks) > 1:
            self.chunks[:] = ["".join(self.chunks)]
        return self.chunks[0] if self.chunks else ""


@dataclass(slots=True)
class TaskPart:
    """A subagent's run (inside its `task` call's card); `parts` are its own."""

    agent: str
    description: str = ""
    depth: int = 1
    status: Literal["running", "ok", "error"] = "running"
    text: str | None = None
    error: str | None = None
    parts: list[Part] = field(default_factory=list)
    kind: Literal["task"] = "task"


@dataclass(slots=True)
class ToolPart:
    """One tool call: its arguments, status, result, and what the tool told views about it."""

    call_id: str
    name: str
    summary: str = ""
    """The call in one line: its `summary_arg` (or first text argument)."""
    input: dict[str, Any] = field(default_factory=dict)
    status: ToolStatus = "running"
    duration_ms: float | None = None
    result: str | None = None
    is_error: bool = False
    namespace: NamespaceDiff | None = None
    """The names the call's code added, changed and removed (the `python` tool)."""
    approval: ApprovalFacts | None = None
    """How an approval was decided, when one was asked; `reason` `ended` (with `detail`) for a
    request that ended before the call's result."""
    ask: str | None = None
    """While awaiting approval: what the person is asked."""
    progress: str = ""
    """While running: what the tool last reported (`3/10 · indexing`), from `ToolUpdate`."""
    asked_at: float | None = None
    """While awaiting approval: when the question was put (epoch seconds)."""
    always: str | None = None
    """While awaiting approval here: the pattern "Always allow" would grant for this tool in the
    conversation (`*`: every call; the command or path itself for `bash`, `write`, `edit`);
    None when it is not offered (a place that runs code later, a request from another kernel)."""
    images: list[ImageRef] = field(default_factory=list)
    details: dict[str, Any] | None = None
    """What the tool told observers about the call (never sent to the model)."""
    task: TaskPart | None = None
    kind: Literal["tool"] = "tool"


@dataclass(slots=True)
class SignalPart:
    """A signal the model was sent (resources, environment), with what changed."""

    signal_type: str
    changes: list[str] = field(default_factory=list)
    kind: Literal["signal"] = "signal"


@dataclass(slots=True)
class CompactionPart:
    """A compaction: running, then folded (tokens before and after, the summary), skipped or failed."""

    reason: str
    running: bool = True
    tokens_before: int | None = None
    tokens_after: int | None = None
    messages_before: int | None = None
    messages_after: int | None = None
    summary: str | None = None
    skipped: bool = False
    is_error: bool = False
    error: str | None = None
    kind: Literal["compaction"] = "compaction"


@dataclass(slots=True)
class NotePart:
    """A line of its own: a retry, a recovery, a cut-off answer, a hint."""

    text: str
    log: bool = False
    """A runtime log line (a retry, a budget warning): the transcript marks it with `·`."""
    kind: Literal["note"] = "note"


@dataclass(slots=True)
class UserPart:
    """A message that joined this live response at a turn boundary (contract 10.3)."""

    text: str
    origin: str
    """The submission the message was admitted as."""
    kind: Literal["user"] = "user"


Part = TextPart | ToolPart | TaskPart | SignalPart | CompactionPart | NotePart | UserPart


@dataclass(slots=True)
class Block:
    """One submission (or, `aside`, conversation-level events between submissions) and its parts."""

    id: str
    kind: Literal["submission", "aside"] = "submission"
    text: str = ""
    """The message as the user sent it."""
    state: BlockState = "queued"
    outcome: str | None = None
    error: dict[str, str] | None = None
    recovered: bool = False
    joined_into: str | None = None
    result: str | None = None
    attempt: int = 0
    parts: list[Part] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        """Whether the block is history (settled, or joined into another response)."""
        return self.state in ("settled", "joined")
