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
import collections
import concurrent.futures
import json
import re
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flue_nb.runtime.errors import FlueError, SessionBusyError, SubmissionAbortedError, ToolInputValidationError
from flue_nb.runtime.events import Event, ToolEnd
from flue_nb.runtime.messages import ToolCall, ToolResultMessage, UserMessage
from flue_nb.runtime.providers.model import ModelRequest
from flue_nb.runtime.providers.offline import FunctionModel, Reply
from flue_nb.runtime.tools.tool import Tool, ToolOutput

if TYPE_CHECKING:
    from flue_nb.runtime.agent import AgentDef
    from flue_nb.runtime.session import Session

__all__ = ["REFUSED", "CallOutcome", "Gate", "Recorder", "call_message", "parse_call"]

Gate = Callable[[Tool, dict[str, Any]], Awaitable[ToolOutput | None]]
"""`(tool, arguments) -> None` to run the call, or the refusal it is recorded with."""

REFUSED: dict[str, ToolOutput] = {}
"""Call id -> the refusal its gate gave: the offered tool returns it instead of running."""

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
    """The model of a served conversation: the calls its newest messages ask for, then the end.

    Messages that joined a live turn (another process or a chat dispatching here while a call
    ran) follow the last result together: each of them is called, not only the last.
    """
    messages = request.messages
    first = len(messages)
    while first > 0 and isinstance(messages[first - 1], UserMessage):
        first -= 1
    asked = [parse_call(m.text) for m in messages[first:] if isinstance(m, UserMessage)]
    calls = [ToolCall(call_id, tool, arguments) for tool, call_id, arguments in (p for p in asked if p)]
    if calls:
        return Reply("", calls)
    if first < len(messages):  # only messages no call is in
        return Reply(
            "This conversation records the calls an outside MCP client makes to this kernel "
            "(`%flue serve`); no model answers messages here. Talk to the assistant in another "
            "conversation."
        )
    ran = [m for m in messages if isinstance(m, ToolResultMessage)]
    last = ran[-1] if ran else None
    if last is None:
        return Reply("Nothing was called.")
    return Reply(f"`{last.name}` {'failed' if last.is_error else 'ran'}; its result went back to the client.")


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What the client gets back: the tool's result, or why the call has none."""

    content: str
    is_error: bool
    images: tuple[Any, ...] = ()


class _Turns:
    """One call at a time per conversation, first come first served, each wait bounded.

    A conversation runs one submission at a time anyway: a call admitted while another runs
    would join that run's turn or queue behind it, unseen by its client. Waiting here instead
    keeps each call its own submission, and a wait past the bound is refused before anything
    is admitted.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[str] = set()
        self._waiting: dict[str, collections.deque[concurrent.futures.Future[None]]] = {}

    async def take(self, key: str, timeout: float) -> bool:
        """Wait for `key`'s turn, at most `timeout` s; True once it is ours (give it back)."""
        with self._lock:
            if key not in self._held:
                self._held.add(key)
                return True
            mine: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._waiting.setdefault(key, collections.deque()).append(mine)
        # `asyncio.wait`, not `wait_for`, which on Python 3.11 returns instead of raising when
        # the turn comes as the call is cancelled: a client gone by then had its call run anyway.
        try:
            await asyncio.wait({asyncio.wrap_future(mine)}, timeout=timeout)
        except asyncio.CancelledError:
            if not self._leave(key, mine):
                self.give(key)  # handed to us as we were cancelled: pass it on
            raise
        return not self._leave(key, mine)

    def _leave(self, key: str, mine: concurrent.futures.Future[None]) -> bool:
        """Stop waiting; False if the turn was handed to us meanwhile (it is ours then)."""
        with self._lock:
            if mine.done():
                return False
            self._waiting[key].remove(mine)
            return True

    def give(self, key: str) -> None:
        """End our turn: the next waiting call of `key` takes it."""
        with self._lock:
            queue = self._waiting.get(key)
            if queue:
                queue.popleft().set_result(None)
                return
            self._waiting.pop(key, None)
            self._held.discard(key)


class Recorder:
    """Runs outside calls through sessions, one conversation per client name."""

    def __init__(
        self,
        sandbox: Any,
        open_session: Callable[[str, AgentDef], Session],
        conversation: Callable[[str], str],
        busy_timeout: float = 30.0,
    ) -> None:
        """Args:
        sandbox: The kernel sandbox whose `tools()` are the ones offered (approval applied).
        open_session: `(conversation id, agent) -> Session`.
        conversation: `client name -> conversation id`.
        busy_timeout: Seconds a call waits for the calls before it in its conversation.
        """
        self.sandbox = sandbox
        self.tools: dict[str, Tool] = {t.name: t for t in sandbox.tools()}
        self._open = open_session
        self._conversation = conversation
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._turns = _Turns()
        self.busy_timeout = busy_timeout
        self.shown_in: str | None = None
        """The conversation the calls are made for, run elsewhere (`serve(shown_in=...)`)."""
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

    async def call(self, client: str, tool: str, arguments: dict[str, Any], gate: Gate | None = None) -> CallOutcome:
        """Run one call as a submission and wait for it; the tool's result (redacted, bounded).

        A call waits for the ones before it in its conversation, at most `busy_timeout`; past
        that, or naming a tool not offered, it is refused and recorded as refused (`failed`).
        With `gate`, the call runs only if the gate lets it (asked before the call waits its
        turn: an answer a person takes time over holds no other call); a refusal is recorded as
        the call's result, with its approval facts.
        """
        session = self.session(client)
        call_id = f"mcp_{uuid.uuid4().hex[:16]}"
        self.calls += 1
        message = call_message(client, tool, call_id, arguments)
        if tool not in self.tools:
            why = f"unknown tool `{tool}`; this kernel offers {sorted(self.tools)}"
            await session.arefuse(message, ToolInputValidationError(why))
            return CallOutcome(f"The call did not run: {why}.", True)
        refusal = await gate(self.tools[tool], arguments) if gate is not None else None
        if refusal is not None:
            REFUSED[call_id] = refusal
        key = session.conversation_id
        if not await self._turns.take(key, self.busy_timeout):
            why = (
                f"the kernel is busy: the calls before this one in `{key}` have been running for over "
                f"{self.busy_timeout:g} s, so this call did not run. Try again when they have ended"
            )
            REFUSED.pop(call_id, None)
            await session.arefuse(message, SessionBusyError(why))
            return CallOutcome(f"The call did not run: {why}.", True)
        try:
            return await self._run(session, call_id, message)
        finally:
            REFUSED.pop(call_id, None)
            self._turns.give(key)

    async def _run(self, session: Session, call_id: str, message: str) -> CallOutcome:
        ended: dict[str, ToolEnd] = {}

        def watch(event: Event) -> None:
            if isinstance(event, ToolEnd) and event.call_id == call_id:
                ended["end"] = event

        stop = session.observe(watch)
        failure: FlueError | None = None
        try:
            receipt = session.dispatch(message)
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
