"""Other ACP agents in the flue chat: `%flue chat --agent acp:COMMAND`, `flue_nb.acp.host(COMMAND)`.

An agent that speaks the Agent Client Protocol (Claude Code's and Codex's adapters, Gemini CLI,
Goose, fast-agent, ...) runs as a subprocess, and this module is its ACP client. Its session is
played to flue_nb's run loop as a model (`AcpModel`): each user message becomes a
`session/prompt`, the agent's text and thinking stream as the model's, and each tool call the
agent reports (`tool_call`) ends a model reply with a call of a stand-in tool (`acp_<kind>`:
`acp_execute`, `acp_edit`, `acp_read`, ...) whose run follows the agent's own call to its end and
returns what the agent reported of it. So the run is flue_nb's own: the submission and its
events in the store, the chat's streaming text and tool cards, `%flue history`, Stop. The agent
runs its tools itself; the stand-ins only show them.

When the agent asks permission (`session/request_permission`), the stand-in of that call asks
through flue_nb's approval wrapper, as a tool under `ask` would: the request is recorded in the
store's ballot, the chat's card gets Approve / Deny (and another kernel's chat of the same
conversation can answer), and the answer goes back as the agent's own option of that kind
(`allow_once`, `reject_once`). Stop aborts the run; its cancellation sends `session/cancel` and
answers a pending permission request `cancelled`.

In a kernel the agent gets this kernel as an MCP server in `session/new` (`flue-kernel`: the
`python`, notebook and file tools of `%flue serve`, through `magics.attach`), so it works in the
live namespace; each such call is also recorded on the kernel's side, in `<conversation>:acp-calls`.
Its token is its own, and each call made with it passes flue_nb's approval first (`kernel_calls`):
an agent that never asks permission still runs nothing there that the approval did not let through.

One hosted agent object is one ACP session, so one conversation: `host()` makes a new one each
time (the magic makes one per conversation). After a kernel restart the agent starts a fresh
session; the conversation's record stays.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import re
import shlex
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict

from flue_nb.acp.kernel_calls import Passes, gate
from flue_nb.runtime.errors import ConfigError, ProviderError
from flue_nb.runtime.messages import AssistantMessage, TextPart, ThinkingPart, ToolCall, UserMessage
from flue_nb.runtime.providers.model import (
    ModelInfo,
    ModelRequest,
    ResponseDone,
    StreamEvent,
    TextChunk,
    ThinkingChunk,
    ToolCallDelta,
)
from flue_nb.runtime.tools.rules import ApprovalRules
from flue_nb.runtime.tools.runs_later import command_runs_later, write_runs_later
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput, call_run

if TYPE_CHECKING:
    from acp import Client

__all__ = ["KINDS", "SPEC_PREFIX", "AcpModel", "Hosted", "host", "hosted_agent", "hosted_of", "stand_in_name"]

SPEC_PREFIX = "acp:"
"""An agent spec naming an ACP agent's command line: `acp:claude-code-acp`, `acp:fast-agent ...`."""

KINDS = ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other")
"""ACP's tool kinds; each has a stand-in tool `acp_<kind>`."""

START_TIMEOUT = 60.0
"""Seconds the agent has to start, `initialize` and open its session."""

INSTRUCTIONS = "An external agent hosted over ACP: it keeps its own instructions and context."


def stand_in_name(kind: str | None) -> str:
    """The stand-in tool of an ACP tool kind (`other` for one ACP does not name)."""
    return f"acp_{kind if kind in KINDS else 'other'}"


class _StandInInput(BaseModel):
    """What a card shows of the agent's call: its title, its input, the files it touches."""

    model_config = ConfigDict(extra="allow")
    title: str = ""
    input: Any = None
    locations: list[str] = []


@dataclass
class _Ask:
    """One `session/request_permission` waiting for flue_nb's answer, or (`for_kernel`) one of the
    agent's calls into this kernel asked about on its card (`kernel_calls`)."""

    options: list[Any]
    answer: asyncio.Future[Any]
    for_kernel: bool = False


@dataclass
class _Call:
    """One tool call the agent reported, as its updates have left it."""

    id: str
    """Its stand-in call's id in the conversation: the agent's, unless the agent used it before."""
    agent_id: str
    """The agent's own id for it (`tool_call_id`), which its updates and permission requests name."""
    title: str = ""
    kind: str = "other"
    status: str = "pending"
    raw_input: Any = None
    raw_output: Any = None
    locations: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    asks: list[_Ask] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    why_ended: str | None = None
    """Set when the agent's turn ended (or the session went) before the call did."""
    unfollowed: bool = False
    """Its stand-in stopped following it (it ended, or was refused): no card asks about it any more."""

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "failed") or self.why_ended is not None

    def merge(self, update: Any) -> None:
        for name in ("title", "kind", "status"):
            value = getattr(update, name, None)
            if value:
                setattr(self, name, str(value))
        if getattr(update, "raw_input", None) is not None:
            self.raw_input = update.raw_input
        if getattr(update, "raw_output", None) is not None:
            self.raw_output = update.raw_output
        locations = getattr(update, "locations", None)
        if locations:
            self.locations = [loc.path for loc in locations]
        content = getattr(update, "content", None)
        if content:
            self.content = [_content_text(c) for c in content]
        self.changed.set()

    def stand_in(self) -> ToolCall:
        data: dict[str, Any] = {"title": self.title or self.id}
        if self.raw_input is not None:
            data["input"] = self.raw_input
        if self.locations:
            data["locations"] = list(self.locations)
        return ToolCall(self.id, stand_in_name(self.kind), data)

    def result(self) -> str:
        text = "\n".join(t for t in self.content if t)
        if not text and self.raw_output is not None:
            text = str(self.raw_output)
        if self.why_ended:
            return f"{text}\n\n({self.why_ended})" if text else f"({self.why_ended})"
        return text or f"({self.status})"


def _content_text(content: Any) -> str:
    """A tool call's content as text: text blocks as they are, a diff named, a terminal referred to."""
    kind = getattr(content, "type", None)
    if kind == "content":
        block = content.content
        return str(getattr(block, "text", "") or getattr(block, "uri", "") or f"[{getattr(block, 'type', 'content')}]")
    if kind == "diff":
        return f"edited {content.path}"
    if kind == "terminal":
        return f"[terminal {content.terminal_id}]"
    return ""


@dataclass
class _Turn:
    """One `session/prompt` and what it has streamed that no model reply has taken yet."""

    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[Any] | None = None
    cancelled: bool = False
    """Cancelled (Stop): what it still streams belongs to no reply."""


class Hosted:
    """One external ACP agent process and its one session: the client side of the protocol."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        mcp_servers: Callable[[], list[Any]] | None = None,
        name: str = "",
    ) -> None:
        if not command:
            raise ConfigError("an ACP agent needs a command line, e.g. acp:claude-code-acp")
        self.command = list(command)
        self.name = name or f"{SPEC_PREFIX}{shlex.join(self.command)}"
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.env = dict(env or {})
        self._mcp_servers = mcp_servers
        self.session_id: str | None = None
        self.agent_info: Any = None
        self.calls: dict[str, _Call] = {}
        """Stand-in call id -> the call."""
        self._latest: dict[str, str] = {}
        """The agent's call id -> the stand-in id of its newest call of that id."""
        self.turn: _Turn | None = None
        self.pending: list[str] = []
        """Messages that joined a turn the agent was still running: the next prompt."""
        self._conn: Any = None
        self._proc: Any = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._starting: asyncio.Lock | None = None
        # The agent's stderr, in a file with no name: nothing is left in the temp dir, even when
        # the kernel is killed (a named one was, one per hosted agent).
        self._log = tempfile.TemporaryFile(prefix="flue-acp-", suffix=".log")  # noqa: SIM115 - closed in close()
        self.closed = False
        self.loop: asyncio.AbstractEventLoop | None = None
        """The loop it runs on (the runtime's), where its calls into the kernel are decided."""
        self.rules = ApprovalRules("ask")
        """How its permission requests and its calls into the kernel are decided (`tools()` sets them)."""
        self.passes = Passes()
        self.reported = asyncio.Event()
        """Set whenever the agent reports or updates a tool call (`kernel_calls` waits for one)."""
        self.on_close: list[Callable[[], object]] = []
        """Called once its session ends for good (`close()`): the kernel's grant is revoked."""

    def __repr__(self) -> str:
        return f"<flue_nb hosted ACP agent {self.name!r} session={self.session_id!r}>"

    @property
    def started(self) -> bool:
        """Whether its process runs now."""
        return self._conn is not None

    # --- the process and the session ------------------------------------------------------

    async def ensure(self) -> None:
        """Start the agent and open its session, once (on the runtime's loop)."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._conn is not None:
                return
            if self.closed:
                raise ProviderError(f"the ACP agent {self.name!r} was closed", kind="other", final=True)
            try:
                await asyncio.wait_for(self._start(), START_TIMEOUT)
            except (OSError, asyncio.TimeoutError, Exception) as exc:  # noqa: BLE001 - any start failure says why
                await self._stop()
                why = "it did not start within {START_TIMEOUT:g} s" if isinstance(exc, asyncio.TimeoutError) else exc
                raise ProviderError(
                    f"could not start the ACP agent `{shlex.join(self.command)}`: {why}{self._stderr_tail()}",
                    kind="other",
                    final=True,
                ) from None

    async def _start(self) -> None:
        from acp import PROTOCOL_VERSION, spawn_agent_process
        from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

        from flue_nb import __version__

        stack = contextlib.AsyncExitStack()
        self._stack = stack
        self.loop = asyncio.get_running_loop()
        conn, self._proc = await stack.enter_async_context(
            spawn_agent_process(
                cast("Client", self),
                self.command[0],
                *self.command[1:],
                env={**os.environ, **self.env},
                cwd=self.cwd,
                transport_kwargs={"stderr": self._log.fileno()},
            )
        )
        init = await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            # No file system or terminal of ours to lend: the agent uses its own, and the kernel's
            # through the MCP server below.
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=False, write_text_file=False), terminal=False
            ),
            client_info=Implementation(name="flue_nb", title="flue_nb", version=__version__),
        )
        self.agent_info = init.agent_info
        servers = self._mcp_servers() if self._mcp_servers is not None else []
        caps = getattr(init.agent_capabilities, "mcp_capabilities", None)
        if not getattr(caps, "http", False):
            servers = [s for s in servers if getattr(s, "type", None) != "http"]  # it said it cannot
        opened = await conn.new_session(cwd=self.cwd, mcp_servers=servers)
        self.session_id = opened.session_id
        self._conn = conn

    def _stderr_tail(self) -> str:
        try:
            # Read where it ends without moving the offset the agent's stderr writes at (shared).
            fd = self._log.fileno()
            end = os.fstat(fd).st_size
            text = os.pread(fd, 2000, max(0, end - 2000)).decode("utf-8", "replace")
        except (OSError, ValueError):  # closed
            return ""
        lines = [line.rstrip() for line in text.splitlines() if line.strip()]
        return f"; it said: {' | '.join(lines[-5:])}" if lines else ""

    async def _stop(self) -> None:
        stack, self._stack, self._conn, self._proc = self._stack, None, None, None
        self.session_id = None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    async def close(self) -> None:
        """End the session and the agent process."""
        self.closed = True
        await self.cancel()
        await self._stop()
        for done in self.on_close:
            with contextlib.suppress(Exception):
                done()
        self.on_close.clear()
        self._log.close()

    # --- prompts ------------------------------------------------------------------------------

    async def start_turn(self, text: str) -> _Turn:
        """Send `text` as the session's next prompt; what it streams goes to the turn's queue."""
        await self.ensure()
        previous = self.turn
        if previous is not None and previous.task is not None and not previous.task.done():
            # A cancelled turn the agent has not closed yet: its late updates are not the new one's.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(previous.task), 30)
        from acp import text_block

        turn = _Turn()
        self.turn = turn
        conn = self._conn

        async def run() -> None:
            try:
                done = await conn.prompt(session_id=self.session_id, prompt=[text_block(text)])
            except Exception as exc:  # noqa: BLE001 - handed to the model reply that waits for it
                self._end_open_calls("the agent's turn failed before this call ended")
                why = str(exc) or type(exc).__name__
                if self._proc is not None:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._proc.wait(), 2)  # a closed connection: did it exit?
                if self._proc is not None and self._proc.returncode is not None:
                    # It died: the next message starts it again, in a fresh session.
                    why = f"the agent exited (status {self._proc.returncode}){self._stderr_tail()}"
                    await self._stop()
                await turn.queue.put(("error", why))
                return
            self._end_open_calls("the agent's turn ended before this call did")
            await turn.queue.put(("done", done))

        turn.task = asyncio.ensure_future(run())
        return turn

    def _end_open_calls(self, why: str) -> None:
        for call in self.calls.values():
            if not call.finished:
                call.why_ended = why
                for ask in call.asks:
                    _cancel_ask(ask)
                call.changed.set()

    async def cancel(self) -> None:
        """`session/cancel` for the running turn; pending permission requests are answered cancelled."""
        if self.turn is not None:
            self.turn.cancelled = True
        for call in self.calls.values():
            for ask in call.asks:
                _cancel_ask(ask)
        turn, conn = self.turn, self._conn
        if conn is not None and turn is not None and turn.task is not None and not turn.task.done():
            with contextlib.suppress(Exception):
                await conn.cancel(session_id=self.session_id)

    def cancel_soon(self) -> None:
        """`cancel()` without waiting (from a task being cancelled)."""
        if self.turn is not None:
            self.turn.cancelled = True  # at once: the next message must not take its leftovers
        asyncio.ensure_future(self.cancel())

    # --- the ACP client's methods -------------------------------------------------------------

    def on_connect(self, conn: Any) -> None:
        """The connection to the agent (kept by `_start`)."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Text, thinking and tool calls go to the running turn; the rest is not shown."""
        kind = getattr(update, "session_update", None)
        turn = self.turn
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            text = getattr(update.content, "text", None)
            if text and turn is not None:
                await turn.queue.put(("text" if kind == "agent_message_chunk" else "thinking", text))
        elif kind in ("tool_call", "tool_call_update"):
            call = self._call(update.tool_call_id, turn, start=kind == "tool_call")
            call.merge(update)
            self.reported.set()

    def _call(self, call_id: str, turn: _Turn | None, *, start: bool = False) -> _Call:
        """The call of this id, made (and announced to the turn) when first heard of. An agent
        that starts a call with the id of one whose stand-in has ended (ACP says ids are unique
        in a session; not every agent keeps to it) gets a new call, under an id of its own in
        the conversation: folded into the old one, its turn would wait for it forever."""
        known = self._latest.get(call_id)
        call = self.calls.get(known) if known is not None else None
        if call is None or (start and call.unfollowed):
            own = (
                call_id if known is None else f"{call_id}~{sum(c.agent_id == call_id for c in self.calls.values()) + 1}"
            )
            call = self.calls[own] = _Call(own, agent_id=call_id)
            self._latest[call_id] = own
            if turn is not None:
                turn.queue.put_nowait(("tool", call))
        return call

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        """Wait for the stand-in of the call to have flue_nb's approval decide; answer with the
        agent's option of that kind."""
        call = self._call(tool_call.tool_call_id, self.turn)
        call.merge(tool_call)
        self.reported.set()
        ask = _Ask(list(options), asyncio.get_running_loop().create_future())
        call.asks.append(ask)
        call.changed.set()
        try:
            return await ask.answer
        except asyncio.CancelledError:
            from acp.schema import DeniedOutcome, RequestPermissionResponse

            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    # --- its calls into this kernel ----------------------------------------------------------

    def ask_for_kernel(self, call: _Call) -> _Ask:
        """Ask about `call` on its card, as if the agent had asked (its call into the kernel
        waits for the answer: None to run, or the refusal)."""
        ask = _Ask([], asyncio.get_running_loop().create_future(), for_kernel=True)
        call.asks.append(ask)
        call.changed.set()
        return ask

    async def kernel_gate(self, tool: Tool, arguments: dict[str, Any]) -> ToolOutput | None:
        """`kernel_calls.gate` for a call into the kernel, from the MCP server's loop."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return ToolOutput("Not run: the hosted agent's session is not open here.", is_error=True)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(gate(self, tool, arguments), loop))

    # --- the stand-in tools -------------------------------------------------------------------

    def tools(self, approval: Any, approver: Callable[[], Any]) -> list[Tool]:
        """One stand-in per ACP kind; a permission the agent asks for, and a call into the kernel,
        is decided under `approval` (`ask`: by `approver()`, flue_nb's approver where the call is shown)."""
        self.rules = ApprovalRules.of(approval)
        return [_stand_in(self, kind, approver) for kind in KINDS]

    @staticmethod
    def decider(name: str) -> Tool:
        """The approval wrapper's tool for a stand-in: it decides (and records, and shows) what
        to answer, and runs nothing."""
        return Tool(name, "", _StandInInput, _granted, summary_arg="title", runs_later=_runs_later(name))


# Kinds whose calls only look: the files they name are not changed.
_LOOKS = ("read", "search", "fetch", "think", "switch_mode")


def _runs_later(name: str) -> Callable[[Mapping[str, Any], str | None], str | None] | None:
    """The stand-in's "runs code later" check (`Tool.runs_later`), so a hosted agent's call is
    asked about under `allow` where flue_nb's own `write` or `bash` would be: a call that changes
    a file (`edit`, `delete`, `move`, or a kind ACP does not name) by the files it reports
    (`locations`); an `execute` call by its command (its raw input's `command`, else its title)."""
    kind = name.removeprefix("acp_")
    if kind in _LOOKS:
        return None

    def check(data: Mapping[str, Any], cwd: str | None) -> str | None:
        for path in data.get("locations") or ():
            why = write_runs_later(path, cwd) if isinstance(path, str) and path else None
            if why is not None:
                return why
        if kind != "execute":
            return None
        raw = data.get("input")
        command = raw.get("command") if isinstance(raw, Mapping) else None
        if isinstance(command, list):  # an argv
            command = " ".join(str(part) for part in command)
        text = command if isinstance(command, str) and command else data.get("title")
        return command_runs_later(text) if isinstance(text, str) and text else None

    return check


def _cancel_ask(ask: _Ask) -> None:
    if not ask.answer.done():
        ask.answer.cancel()


def _option(options: list[Any], approved: bool) -> Any:
    """The agent's own option for a yes (allow once, else always) or a no (reject once, else always)."""
    wanted = ("allow_once", "allow_always") if approved else ("reject_once", "reject_always")
    for kind in wanted:
        found = next((o for o in options if o.kind == kind), None)
        if found is not None:
            return found
    return None


async def _granted(args: BaseModel, ctx: ToolContext) -> ToolOutput:
    return ToolOutput("approved")


def _stand_in(hosted: Hosted, kind: str, approver: Callable[[], Any]) -> Tool:
    from flue_nb.runtime.tools.approval import with_approval

    name = stand_in_name(kind)
    decider = hosted.decider(name)

    async def run(args: BaseModel, ctx: ToolContext) -> ToolOutput:
        call = hosted.calls.get(ctx.call_id)
        if call is None:
            return ToolOutput(
                "The agent session that made this call is gone (a restart?): nothing is known of how it ended.",
                is_error=True,
            )
        try:
            gate = with_approval(decider, rules=hosted.rules, approver=approver(), cwd=hosted.cwd)
            return await _follow(call, args, ctx, gate, hosted.passes)
        except asyncio.CancelledError:
            hosted.cancel_soon()  # Stop: the agent is told, as flue_nb's own tools are interrupted
            raise

    return Tool(
        name,
        f"A `{kind}` tool call of the hosted ACP agent (it runs the call itself; this shows it).",
        _StandInInput,
        run,
        summary_arg="title",
    )


async def _follow(call: _Call, args: BaseModel, ctx: ToolContext, gate: Tool, passes: Passes) -> ToolOutput:
    """Answer the call's permission requests (and its calls into the kernel) through `gate`
    (flue_nb's approval) until it ends; what it ended with, or the refusal."""
    try:
        return await _answer_asks(call, args, ctx, gate, passes)
    finally:
        call.unfollowed = True
        for ask in call.asks:  # no one answers them now: a call into the kernel waiting is refused
            _cancel_ask(ask)


async def _answer_asks(call: _Call, args: BaseModel, ctx: ToolContext, gate: Tool, passes: Passes) -> ToolOutput:
    from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

    facts = None
    while True:
        call.changed.clear()
        if call.asks:
            ask = call.asks.pop(0)
            if ask.answer.done():
                continue  # cancelled meanwhile
            decided = await call_run(gate, args, ctx)
            if not isinstance(decided, ToolOutput):
                decided = ToolOutput(str(decided))
            facts = decided.approval
            approved = facts is None or bool(facts.approved)
            if ask.for_kernel:
                if not ask.answer.done():
                    ask.answer.set_result(None if approved else decided)
                if not approved:
                    return decided
                continue
            if approved:
                passes.leave(call.raw_input)  # before the answer: the agent calls the kernel at once
            option = _option(ask.options, approved)
            if not ask.answer.done():
                outcome = (
                    AllowedOutcome(outcome="selected", option_id=option.option_id)
                    if option is not None
                    else DeniedOutcome(outcome="cancelled")
                )
                ask.answer.set_result(RequestPermissionResponse(outcome=outcome))
            if not approved:
                return decided  # the refusal, in flue_nb's words and with its facts
            continue
        if call.finished:
            failed = call.status == "failed" or (call.why_ended is not None and call.status != "completed")
            return ToolOutput(call.result(), is_error=failed, approval=facts, details={"acp": _details(call)})
        await call.changed.wait()


def _details(call: _Call) -> dict[str, Any]:
    return {"tool_call_id": call.agent_id, "kind": call.kind, "status": call.status, "title": call.title}


def _new_text(messages: list[Any], *, one_submission: bool) -> str:
    """The user messages after the model's last reply: those that arrived together (`joined` a
    running turn), or only the newest submission's (a message that failed before it is not sent
    again: its sender saw it fail)."""
    texts: list[str] = []
    newest: str | None = None
    for message in reversed(messages):
        if not isinstance(message, UserMessage):
            break
        if one_submission and texts and message.submission_id != newest:
            break
        newest = message.submission_id
        texts.append(message.text)
    return "\n\n".join(reversed(texts))


class AcpModel:
    """A hosted ACP agent's session as flue_nb's model (see the module docstring)."""

    provider_name = "acp"

    def __init__(self, hosted: Hosted) -> None:
        self.hosted = hosted
        self._info = ModelInfo(hosted.name, context_window=1_000_000_000, max_output_tokens=1_000_000)

    @property
    def info(self) -> ModelInfo:
        """No window to budget: the agent keeps its own context."""
        return self._info

    def __repr__(self) -> str:
        return f"AcpModel({self.hosted.name!r})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The agent's next stretch of the turn: text and thinking up to its next tool call (a
        stand-in call), or to its turn's end."""
        async for event in self._stream(request):
            yield event

    async def _stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        hosted = self.hosted
        if request.purpose == "compaction":
            yield _done([TextPart("(The hosted agent keeps its own context; nothing to summarise.)")], "end_turn")
            return
        turn = hosted.turn
        running = (
            turn is not None
            and not turn.cancelled
            and (turn.task is None or not turn.task.done() or not turn.queue.empty())
        )
        text = _new_text(request.messages, one_submission=not running)
        if not running:
            if not text:
                yield _done([], "end_turn")  # a recovered run whose calls are all answered
                return
            turn = await hosted.start_turn(text)
        elif text:
            hosted.pending.append(text)  # ACP takes no message into a running prompt: the next one
        assert turn is not None
        said: list[str] = []
        thought: list[str] = []
        try:
            while True:
                kind, value = await turn.queue.get()
                if kind == "text":
                    said.append(value)
                    yield TextChunk(value)
                elif kind == "thinking":
                    thought.append(value)
                    yield ThinkingChunk(value)
                elif kind == "tool":
                    call = value.stand_in()
                    yield ToolCallDelta(call.id, call.name)
                    yield _done([*_parts(thought, said), call], "tool_use")
                    return
                elif kind == "error":
                    raise ProviderError(f"the ACP agent {hosted.name!r} failed: {value}", kind="other", final=True)
                else:  # done
                    if hosted.pending:
                        joined = "\n\n".join(hosted.pending)
                        hosted.pending.clear()
                        turn = await hosted.start_turn(joined)
                        continue
                    stop = str(getattr(value, "stop_reason", "end_turn"))
                    yield _done(_parts(thought, said), stop, aborted=stop == "cancelled")
                    return
        except asyncio.CancelledError:
            hosted.cancel_soon()
            raise


def _parts(thought: list[str], said: list[str]) -> list[Any]:
    parts: list[Any] = []
    if thought:
        parts.append(ThinkingPart("".join(thought), "acp"))
    if said:
        parts.append(TextPart("".join(said)))
    return parts


def _done(parts: list[Any], stop: str, *, aborted: bool = False) -> ResponseDone:
    return ResponseDone(AssistantMessage(parts, None, stop, None, aborted))


# --- agents -----------------------------------------------------------------------------------


def _command(spec: str | Sequence[str]) -> list[str]:
    if isinstance(spec, str):
        spec = spec.strip()
        if spec.startswith(SPEC_PREFIX):
            spec = spec[len(SPEC_PREFIX) :]
        try:
            return shlex.split(spec)
        except ValueError as exc:
            raise ConfigError(f"cannot read the ACP agent's command line {spec!r}: {exc}") from None
    return [str(part) for part in spec]


def host(
    command: str | Sequence[str],
    *,
    name: str | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    approval: Any = "ask",
    approval_timeout: float | None = None,
    mcp_servers: Sequence[Mapping[str, Any]] = (),
    serve_kernel: bool | None = None,
    conversation: str | None = None,
) -> Any:
    """An `@flue_nb.agent` that is an external ACP agent: start it with `command` (a command line,
    `acp:` optional, or its argv) and talk to it through flue_nb's sessions, views and store.

    Args:
        name: The agent's name (default `acp:<command>`).
        cwd: Where the agent runs and works (default: the current directory).
        env: Variables added to this process's environment for it (its API keys, ...).
        approval: How its permission requests are decided: `ask` (the chat's Approve / Deny, the
            store's ballot), `allow` or `deny`, or approval rules over the stand-in tools
            (`acp_execute`, `acp_edit`, ...).
        approval_timeout: Seconds an `ask` waits in a chat before it is denied (None: no limit).
        mcp_servers: More MCP servers for its session: `{"name", "url", "headers"}` or
            `{"name", "command": [...], "env"}`.
        serve_kernel: Give it this kernel's tools as the MCP server `flue-kernel` (default: when
            running in a Jupyter kernel).
        conversation: The conversation it will talk in, which the kernel's record of its
            `flue-kernel` calls is named after (default: the kernel's current one).

    One agent object is one ACP session: use it for one conversation.
    """
    from flue_nb.runtime.agent import agent
    from flue_nb.runtime.agent.hooks import use_model, use_tool
    from flue_nb.runtime.tools.rules import ApprovalRules

    ApprovalRules.of(approval)  # a ConfigError now, not at the first permission request
    argv = _command(command)
    label = name or f"{SPEC_PREFIX}{shlex.join(argv)}"
    in_kernel = _in_kernel()
    give_kernel = in_kernel if serve_kernel is None else bool(serve_kernel)
    extra = [_mcp_server(s) for s in mcp_servers]
    # Served now, from the caller's thread: from a cell that is the kernel's main thread, where
    # the agent's code then runs between cells as a cell's would (`%flue serve`'s rule).
    kernel: list[Any] = []
    hosted = Hosted(argv, cwd=cwd, env=env, mcp_servers=lambda: kernel + extra, name=label)
    if give_kernel:
        kernel.append(_kernel_server(conversation, hosted))
    _opened.append(hosted)
    model = AcpModel(hosted)

    def approver() -> Any:
        from flue_nb.notebook.kernel.approve import default_approver

        return default_approver(approval_timeout)

    tools = hosted.tools(approval, approver)

    def hosted_agent_fn() -> str:
        use_model(model, compaction=False)
        for t in tools:
            use_tool(t)
        return INSTRUCTIONS

    hosted_agent_fn.hosted = hosted  # type: ignore[attr-defined]  # `hosted_of` finds it here
    # Every call the agent reports is a turn here: a long task needs many.
    return agent(hosted_agent_fn, name=label, max_turns=10_000)


def hosted_of(agent: Any) -> Hosted | None:
    """The hosted ACP agent behind an agent `host()` made (None for any other agent)."""
    found = getattr(getattr(agent, "fn", None), "hosted", None)
    return found if isinstance(found, Hosted) else None


_cache_lock = threading.Lock()
_cache: dict[tuple[str, str, str], Any] = {}
_opened: list[Hosted] = []


def hosted_agent(spec: str, *, conversation: str, store: str) -> Any:
    """The agent `acp:COMMAND` of one conversation of one store, made once per kernel (the magic's)."""
    key = (spec.strip(), conversation, store)
    with _cache_lock:
        found = _cache.get(key)
        if found is None:
            found = _cache[key] = host(spec, name=spec.strip(), conversation=conversation)
        return found


def _in_kernel() -> bool:
    import sys

    if "ipykernel" not in sys.modules:
        return False
    from ipykernel.kernelbase import Kernel

    return bool(Kernel.initialized())


def _kernel_server(conversation: str | None, hosted: Hosted) -> Any:
    """This kernel's tools for the agent: `%flue serve`, as an attached `flue-nb acp` gets them,
    with a token of its own whose calls pass `hosted.kernel_gate` (flue_nb's approval) first."""
    import json

    from acp.schema import HttpHeader, HttpMcpServer

    from flue_nb.notebook.magics.attach import attach, detach

    served = json.loads(attach("hosted ACP agent", conversation=conversation, gate=hosted.kernel_gate))
    hosted.on_close.append(lambda: detach(served["attachment"]))
    headers = [HttpHeader(name="Authorization", value=f"Bearer {served['token']}")]
    return HttpMcpServer(type="http", name="flue-kernel", url=served["url"], headers=headers)


def _mcp_server(spec: Mapping[str, Any]) -> Any:
    from acp.schema import EnvVariable, HttpHeader, HttpMcpServer, McpServerStdio

    name = str(spec.get("name") or "")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"an MCP server for the ACP agent needs a name of letters, digits, `_`, `.` or `-`: {spec!r}")
    if spec.get("url"):
        headers = [HttpHeader(name=k, value=v) for k, v in dict(spec.get("headers") or {}).items()]
        return HttpMcpServer(type="http", name=name, url=str(spec["url"]), headers=headers)
    command = list(spec.get("command") or [])
    if not command:
        raise ConfigError(f"an MCP server for the ACP agent needs `url` or `command`: {spec!r}")
    env = [EnvVariable(name=k, value=v) for k, v in dict(spec.get("env") or {}).items()]
    return McpServerStdio(name=name, command=str(command[0]), args=[str(a) for a in command[1:]], env=env)


@atexit.register
def _close_all() -> None:
    """Stop the agent processes this kernel started (each is closed on the runtime's loop)."""
    started = [h for h in _opened if h.started]
    for h in _opened:
        if not h.started:
            h._log.close()
    if not started:
        return
    from flue_nb.runtime.coordinator import coordinator

    async def close() -> None:
        await asyncio.gather(*(h.close() for h in started), return_exceptions=True)

    with contextlib.suppress(Exception):
        coordinator().submit(close()).result(10)
