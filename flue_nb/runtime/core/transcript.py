"""The context window in memory: messages with the record seq and submission that stored them.

A `Transcript` mirrors what the store holds for the current window, so a turn never re-reads
the store; a `Recorder` is where appends go (the durable store, or nowhere for a subagent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from flue_nb.runtime.messages import AssistantMessage, Message, ToolResultMessage

__all__ = ["MemoryRecorder", "Recorder", "Transcript"]


@dataclass(slots=True)
class Transcript:
    """Messages of the current window, with their record seqs and submission ids."""

    messages: list[Message] = field(default_factory=list)
    seqs: list[int | None] = field(default_factory=list)
    sids: list[str | None] = field(default_factory=list)
    system: str | None = None
    """The frozen system prompt of this window (None until the first turn composes it)."""
    roster: dict[str, Any] | None = None
    """What the model was last told it has (tools, skills, subagents, sandbox)."""

    def add(self, message: Message, seq: int | None = None, sid: str | None = None) -> None:
        """Append one message."""
        self.messages.append(message)
        self.seqs.append(seq)
        self.sids.append(sid)

    def reset(self, messages: Sequence[Message], seqs: Sequence[int | None], sids: Sequence[str | None]) -> None:
        """Replace the window (after compaction or a reload)."""
        self.messages = list(messages)
        self.seqs = list(seqs)
        self.sids = list(sids)

    def commit(
        self,
        recorder: Recorder,
        messages: Sequence[Message],
        *,
        sid: str | None,
        sids: Sequence[str | None] | None = None,
        state: dict[str, Any] | None = None,
        extra: Sequence[tuple[str, dict[str, Any]]] = (),
        updates: Sequence[Any] = (),
    ) -> None:
        """The one durable write: store the messages (atomically with the rest), then add them here.

        `sids` names each message's own submission when it differs from the writer's (`sid`),
        as for messages that join a live response.
        """
        seqs = recorder.append(messages, state=state, extra=extra, updates=updates)
        for m, seq, owner in zip(messages, seqs, sids if sids is not None else [sid] * len(messages)):
            self.add(m, seq, owner)

    def unresolved_calls(self) -> list[Any]:
        """Tool calls of the last assistant message that have no result yet."""
        for i in range(len(self.messages) - 1, -1, -1):
            m = self.messages[i]
            if isinstance(m, AssistantMessage):
                answered = {r.call_id for r in self.messages[i + 1 :] if isinstance(r, ToolResultMessage)}
                return [c for c in m.tool_calls if c.id not in answered]
        return []


class Recorder(Protocol):
    """Where a run's messages go."""

    def append(
        self,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        extra: Sequence[tuple[str, dict[str, Any]]] = (),
        updates: Sequence[Any] = (),
    ) -> list[int | None]:
        """Persist messages, state writes, extra records and submission updates atomically."""
        ...

    def partial(self, data: dict[str, Any] | None) -> None:
        """Snapshot (or clear, with None) the response being streamed."""
        ...

    def step(self, call_id: str, name: str, value: Any) -> None:
        """Record a durable tool step's value."""
        ...

    def steps(self, call_id: str) -> dict[str, Any]:
        """Recorded step values of one tool call."""
        ...


class MemoryRecorder:
    """A recorder that keeps nothing: subagents run with a fresh, ephemeral context."""

    def __init__(self) -> None:
        self._steps: dict[str, dict[str, Any]] = {}

    def append(
        self,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        extra: Sequence[tuple[str, dict[str, Any]]] = (),
        updates: Sequence[Any] = (),
    ) -> list[int | None]:
        """Keep nothing; no seqs."""
        return [None] * len(messages)

    def partial(self, data: dict[str, Any] | None) -> None:
        """Nothing to snapshot."""

    def step(self, call_id: str, name: str, value: Any) -> None:
        """Remember the step for this process only."""
        self._steps.setdefault(call_id, {})[name] = value

    def steps(self, call_id: str) -> dict[str, Any]:
        """Steps recorded in this process."""
        return dict(self._steps.get(call_id, {}))
