"""The one event type observers see (contract 15), and the small bus that delivers it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Event", "EventBus", "EventType"]

EventType = Literal[
    "agent_start",
    "agent_end",
    "idle",
    "submission_queued",
    "submission_running",
    "submission_settled",
    "submission_recovery",
    "turn_start",
    "turn",
    "message_start",
    "message_end",
    "text_delta",
    "thinking_delta",
    "tool_start",
    "tool",
    "task_start",
    "task",
    "compaction_start",
    "compaction",
    "signal",
    "log",
]


@dataclass(slots=True)
class Event:
    """Something that happened in a conversation; `data` holds the type's own fields."""

    type: EventType
    event_index: int
    timestamp: float
    conversation_id: str
    submission_id: str | None = None
    turn_id: str | None = None
    task_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


Observer = Callable[[Event], None]


class EventBus:
    """Numbers events per conversation and hands them to observers, in order."""

    def __init__(self, conversation_id: str, *, clock: Callable[[], float] = time.time) -> None:
        self.conversation_id = conversation_id
        self._clock = clock
        self._next_index = 0
        self._observers: list[Observer] = []

    def observe(self, callback: Observer) -> Callable[[], None]:
        """Call `callback` with every event from now on; returns a function that stops it."""
        self._observers.append(callback)

        def stop() -> None:
            if callback in self._observers:
                self._observers.remove(callback)

        return stop

    def emit(
        self,
        type: EventType,
        *,
        submission_id: str | None = None,
        turn_id: str | None = None,
        task_id: str | None = None,
        **data: Any,
    ) -> Event:
        """Build the next event and deliver it; an observer's exception never breaks the run."""
        event = Event(
            type,
            self._next_index,
            self._clock(),
            self.conversation_id,
            submission_id,
            turn_id,
            task_id,
            data,
        )
        self._next_index += 1
        for cb in list(self._observers):
            try:
                cb(event)
            except Exception:  # noqa: BLE001 - a broken observer must not fail the agent
                import logging

                logging.getLogger("flue_nb").exception("event observer failed on %s", type)
        return event
