"""An ACP client for the tests that drive `flue-nb acp`: it records every update and answers
permission requests as told."""

from __future__ import annotations

import asyncio
from typing import Any

from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

# For `spawn_agent_process(..., transport_kwargs=TRANSPORT)`: the SDK gives the agent 2 s to exit
# once its stdin closes, then calls terminate(), which raises ProcessLookupError if the agent exited
# in between (seen once with `make bench` beside the suite; idle, `flue-nb acp` exits 0.4 s after
# its stdin closes). 20 s keeps a loaded machine clear of that race.
TRANSPORT = {"shutdown_timeout": 20.0}


class Client:
    """An ACP client that records every update and answers permission requests as told."""

    def __init__(self, answer: str | None = "approve") -> None:
        self.answer = answer
        self.updates: list[tuple[str, Any]] = []
        self.asked: list[Any] = []
        self.asked_event = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        self.asked.append((tool_call, [o.option_id for o in options]))
        self.asked_event.set()
        if self.answer is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answer))

    def kinds(self) -> list[str]:
        return [u.session_update for _, u in self.updates]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for _, u in self.updates if u.session_update == kind)

    def on_connect(self, conn: Any) -> None:
        pass
