"""A subagent's run kept durably, as the steps of the `task` call that started it (contract 11.2).

The child's messages (its prompt first: the recorded start), its frozen system prompt and the
steps of its own durable tools are recorded under the parent's `task` call with the parent's
recorder, so they commit to the store like the parent's records, fenced by the same lease. After
a crash the `task` call is re-run (it is a durable tool): the child's window is rebuilt from
these steps and the child continues from its last recorded message instead of the call being
marked "outcome unknown". A child that had already answered returns that answer without a model
call. Nested tasks nest their steps the same way.

Step names under a `task` call: `system` ({"text", "roster"}), `message:NNNNNN` (a message in
window order), `step:<child call id>:<name>` (a step of the child's own durable tool call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flue_nb.runtime.core.transcript import Recorder, Transcript
from flue_nb.runtime.messages import AssistantMessage, Message, message_from_dict, message_to_dict
from flue_nb.runtime.redact import redact_value

__all__ = ["TaskRecorder", "step_response", "step_responses"]

_MESSAGE = "message:"
_STEP = "step:"


class TaskRecorder:
    """The `Recorder` of a subagent: its records become steps of the parent's `task` call."""

    def __init__(self, parent: Recorder, task_call_id: str) -> None:
        self.parent = parent
        self.call_id = task_call_id
        recorded = parent.steps(task_call_id)
        self._recorded = recorded
        self._next = sum(1 for name in recorded if name.startswith(_MESSAGE))

    # --- what was recorded before (a resumed task) ---------------------------------------------

    def restore(self, transcript: Transcript) -> bool:
        """Fill `transcript` with the child's recorded window; False when nothing was recorded."""
        names = sorted(n for n in self._recorded if n.startswith(_MESSAGE))
        if not names:
            return False
        system = self._recorded.get("system")
        if isinstance(system, dict):
            transcript.system = system.get("text")
            transcript.roster = system.get("roster")
        messages = [message_from_dict(self._recorded[n]) for n in names]
        transcript.reset(messages, [None] * len(messages), [None] * len(messages))
        return True

    @staticmethod
    def finished(transcript: Transcript) -> AssistantMessage | None:
        """The child's final answer, if it gave one before the crash."""
        last = transcript.messages[-1] if transcript.messages else None
        if isinstance(last, AssistantMessage) and not last.tool_calls and not last.aborted:
            return last
        return None

    # --- the Recorder protocol -----------------------------------------------------------------

    def append(
        self,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        extra: Sequence[tuple[str, dict[str, Any]]] = (),
        updates: Sequence[Any] = (),
    ) -> list[int | None]:
        """Record the messages (and the system prompt, and nested steps) as steps, atomically."""
        items: list[tuple[str, dict[str, Any]]] = []
        for m in messages:
            items.append(self._item(f"{_MESSAGE}{self._next:06d}", message_to_dict(m)))
            self._next += 1
        for kind, data in extra:
            if kind == "system":
                items.append(self._item("system", data))
            elif kind == "step":  # a nested task's records, or a step of a child's durable tool
                items.append(self._item(f"{_STEP}{data['call_id']}:{data['name']}", data["value"]))
        # A subagent's persistent state, roster notes and compaction records stay in memory, as
        # before; a resumed child rebuilds them.
        if items:
            self.parent.append([], extra=items)
        return [None] * len(messages)

    def partial(self, data: dict[str, Any] | None) -> None:
        """A half-streamed child response is not kept: a resumed child asks again."""

    def step(self, call_id: str, name: str, value: Any) -> None:
        """Record a step of one of the child's durable tool calls."""
        self.parent.append([], extra=[self._item(f"{_STEP}{call_id}:{name}", value)])

    def steps(self, call_id: str) -> dict[str, Any]:
        """The recorded steps of one of the child's tool calls."""
        prefix = f"{_STEP}{call_id}:"
        current = self.parent.steps(self.call_id)
        return {name[len(prefix) :]: value for name, value in current.items() if name.startswith(prefix)}

    def _item(self, name: str, value: Any) -> tuple[str, dict[str, Any]]:
        # The child's answer is a tool result to the parent: stored, like one, with known
        # secrets redacted (its tool results already are; its own text is not, otherwise).
        value = redact_value(value)
        self._recorded[name] = value
        return ("step", {"call_id": self.call_id, "name": name, "value": value})


def step_response(name: str, value: Any) -> AssistantMessage | None:
    """The subagent response a `task` call's step holds, if it holds one (nested tasks too)."""
    # Step names: `message:NNNNNN`, nested as `step:<call id>:message:NNNNNN`.
    if name.split(":")[-2:-1] != ["message"] or not isinstance(value, dict) or value.get("kind") != "assistant":
        return None
    m = message_from_dict(value)
    return m if isinstance(m, AssistantMessage) else None


def step_responses(steps: dict[str, Any]) -> list[AssistantMessage]:
    """Every subagent response among a `task` call's recorded steps, in step order."""
    return [m for name in sorted(steps) if (m := step_response(name, steps[name])) is not None]
