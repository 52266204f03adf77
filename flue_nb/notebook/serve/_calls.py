"""An outside client's tool call, run and recorded as a submission of a conversation.

Each call is admitted like a message (`MCP call from `claude-code`: python [call mcp_…]` and its
arguments as JSON), and the conversation's agent has a model that plays the client: it answers
the message with exactly that tool call, then ends the turn. So the runtime's own machinery does
the rest, as for our own agent: the approval wrapper, redaction and limits of `execute_tool`, the
durable record (`%flue history`, `flue-nb history`), the live events a `%flue chat` draws as tool
cards, and abort (Stop, `%flue abort`). The client gets the call's `ToolEnd`, or why there is none.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flue_nb.runtime.errors import FlueError, SubmissionAbortedError
from flue_nb.runtime.events import Event, ToolEnd
from flue_nb.runtime.messages import ToolCall, ToolResultMessage, UserMessage
from flue_nb.runtime.providers.model import ModelRequest
from flue_nb.runtime.providers.offline import FunctionModel, Reply
from flue_nb.runtime.tools.tool import Tool

if TYPE_CHECKING:
    from flue_nb.runtime.agent import AgentDef
    from flue_nb.runtime.session import Session

__all__ = ["CallOutcome", "Recorder", "call_message", "parse_call"]

_HEAD = re.compile(r"^MCP call from `(?P<client>[^`]*)`: (?P<tool>\S+) \[call (?P<id>[\w-]+)\]$")


def call_message(client: str, tool: str, call_id: str, arguments: dict[str, Any]) -> str:
    """The user message that records one outside call (read back by `parse_call`)."""
    client = client.replace("`", "'")
    return f"MCP call from `{client}`: {tool} [call {call_id}]\n{json.dumps(arguments, ensure_ascii=False)}"


def parse_call(text: str) -> tuple[str, str, dict[str, Any]] | None:
    """(tool, call id, arguments) of a message made by `call_message`, else None."""
    head, _, body = text.partition("\n")
    found = _HEAD.match(head)
    if found is None:
        return None
    try:
        arguments = json.loads(body) if body.strip() else {}
    except ValueError:
        return None
    return (found["tool"], found["id"], arguments) if isinstance(arguments, dict) else None


def play_client(request: ModelRequest) -> Reply:
    """The model of a served conversation: the call its last message asks for, then the end."""
    messages = request.messages
    last = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], UserMessage)), None)
    parsed = parse_call(messages[last].text) if last is not None else None  # type: ignore[union-attr]
    if parsed is None:
        return Reply(
            "This conversation records the calls an outside MCP client makes to this kernel "
            "(`%flue serve`); no model answers messages here. Talk to the assistant in another "
            "conversation."
        )
    tool, call_id, arguments = parsed
    assert last is not None
    result = next(
        (m for m in messages[last + 1 :] if isinstance(m, ToolResultMessage) and m.call_id == call_id),
        None,
    )
    if result is None:
        return Reply("", [ToolCall(call_id, tool, arguments)])
    return Reply(f"`{tool}` {'failed' if result.is_error else 'ran'}; its result went back to the client.")


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What the client gets back: the tool's result, or why the call has none."""

    content: str
    is_error: bool
    images: tuple[Any, ...] = ()


class Recorder:
    """Runs outside calls through sessions, one conversation per client name."""

    def __init__(
        self,
        sandbox: Any,
        open_session: Callable[[str, AgentDef], Session],
        conversation: Callable[[str], str],
    ) -> None:
        """Args:
        sandbox: The kernel sandbox whose `tools()` are the ones offered (approval applied).
        open_session: `(conversation id, agent) -> Session`.
        conversation: `client name -> conversation id`.
        """
        self.sandbox = sandbox
        self.tools: dict[str, Tool] = {t.name: t for t in sandbox.tools()}
        self._open = open_session
        self._conversation = conversation
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.calls = 0
        self.model = FunctionModel(play_client, id="mcp-client", context_window=1_000_000_000)

    def session(self, client: str) -> Session:
        """The session recording `client`'s calls (opened on first use)."""
        cid = self._conversation(client)
        with self._lock:
            if cid not in self._sessions:
                self._sessions[cid] = self._open(cid, self._agent())
            return self._sessions[cid]

    def session_of(self, conversation_id: str) -> Session | None:
        """The open session recording `conversation_id`, if calls were recorded there."""
        with self._lock:
            return self._sessions.get(conversation_id)

    def conversations(self) -> list[str]:
        """The conversations calls were recorded in so far."""
        with self._lock:
            return list(self._sessions)

    def _agent(self) -> AgentDef:
        from flue_nb.runtime.agent import agent
        from flue_nb.runtime.agent.hooks import use_model, use_sandbox

        sandbox, model = self.sandbox, self.model

        def mcp_client() -> str:
            use_model(model, compaction=False)  # nothing to summarise: each call is its own turn
            use_sandbox(sandbox)
            return "Calls from an outside MCP client, recorded by `%flue serve`."

        made: AgentDef = agent(mcp_client, name="mcp-client")  # `agent` is typed for both of its forms
        return made

    async def call(self, client: str, tool: str, arguments: dict[str, Any]) -> CallOutcome:
        """Run one call as a submission and wait for it; the tool's result (redacted, bounded)."""
        session = self.session(client)
        call_id = f"mcp_{uuid.uuid4().hex[:16]}"
        ended: dict[str, ToolEnd] = {}

        def watch(event: Event) -> None:
            if isinstance(event, ToolEnd) and event.call_id == call_id:
                ended["end"] = event

        stop = session.observe(watch)
        failure: FlueError | None = None
        try:
            receipt = session.dispatch(call_message(client, tool, call_id, arguments))
            self.calls += 1
            try:
                await session.aread(receipt)
            except FlueError as exc:
                failure = exc
            except asyncio.CancelledError:
                session.abort()  # the client cancelled its request: the call stops as on Stop
                raise
        finally:
            stop()
        end = ended.get("end")
        if isinstance(failure, SubmissionAbortedError) or (end is not None and end.ended == "aborted"):
            why = failure.message if failure is not None else "the call was aborted"
            return CallOutcome(
                f"Aborted in the notebook: {why}. The user stopped this call (Stop, `%flue abort` or "
                "the kernel's interrupt); what it did before stopping stays in the kernel.",
                True,
            )
        if end is None:
            why = failure.message if failure is not None else "the run ended without running it"
            return CallOutcome(f"The call did not run: {why}", True)
        return CallOutcome(end.content, end.is_error, tuple(end.images))
