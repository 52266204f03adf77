"""`flue-nb acp`: flue_nb's conversations served as an ACP agent over stdio.

The protocol is the `agent-client-protocol` package's (`acp.run_agent`); this module maps it onto
sessions. An ACP session is a flue_nb conversation of the same id in the store (`--db`, else
`$FLUE_DB`, else the working directory's `.flue/flue.sqlite`): `session/new` starts one,
`session/load` reopens any stored conversation (a `%flue chat`'s too) and replays it as updates,
`session/prompt` admits the message durably and streams its run, `session/cancel` aborts it.
Attached to a running kernel (`--kernel`, `--notebook`: `flue_nb.acp.kernel`), a session is the
conversation that kernel's `%flue` cells continue, in the kernel's store, and its tools are the
kernel's. A session may also name its kernel itself, in `session/new`'s `_meta`
(`{"flue_nb": {"kernel": CONNECTION_FILE}}`): jupyter-ai's flue_nb persona
(`flue_nb.acp.jupyter_ai`) serves each chat from one process that way, each in its notebook's kernel.
An `ask` approval becomes `session/request_permission`; the request is also the store's ballot,
so a chat of the same conversation elsewhere can answer it and every view agrees on the answer.

Runs of the ACP loop and of flue_nb's runtime live on different threads: events cross over with
`call_soon_threadsafe`, approvals with `run_coroutine_threadsafe`.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.contrib.permissions import default_permission_options
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    RequestPermissionResponse,
)

if TYPE_CHECKING:
    from acp import Agent

    from flue_nb.acp.kernel import KernelTarget

from flue_nb.acp.updates import Paragraphs, kind_of, locations_of, to_updates
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.events import Event, SubmissionSettled
from flue_nb.runtime.session import Session, init
from flue_nb.runtime.tools.approval import ApprovalRequest, Unanswered

__all__ = ["INSTRUCTIONS", "FlueAcpAgent", "default_agent", "load_object", "serve"]

INSTRUCTIONS = """\
You are a helpful coding and data assistant working in the user's directory through an editor \
(an ACP client). The `python` tool runs code in a namespace of your own that persists across \
calls; use the file and shell tools for the working directory. Answer concisely; say what you \
changed."""

AgentFactory = Callable[[str, Callable[..., Any], list[dict[str, Any]]], Any]
"""Builds the agent of a session from its working directory, the ACP approver and the client's
MCP servers (as `use_mcp` keyword arguments)."""

KernelAgents = Callable[["KernelTarget"], AgentFactory]
"""The agent factory of sessions working in a given kernel (`kernel_agent(model, target)`)."""


def load_object(ref: str) -> Any:
    """`module:attribute` imported (the module from the current directory too)."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise ConfigError(f"{ref!r} is not module:attribute")
    import sys

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def default_agent(model: Any) -> AgentFactory:
    """The assistant of an ACP session: `model`, the file and shell tools in the session's
    directory and a `python` namespace of its own, every tool that changes something under `ask`."""
    from flue_nb.notebook.kernel.sandbox import kernel
    from flue_nb.runtime.agent import agent
    from flue_nb.runtime.agent.hooks import use_mcp, use_model, use_sandbox

    def make(cwd: str, approver: Callable[..., Any], mcp: list[dict[str, Any]]) -> Any:
        # No kernel here: commands run as the user, as an editor's own agents' do ("none").
        box = kernel(cwd, namespace={}, approval="ask", approver=approver, sandbox="none")

        @agent(name="acp")
        def assistant() -> str:
            use_model(model)
            use_sandbox(box)
            for server in mcp:
                use_mcp(**server)  # its tools are under the sandbox's approval rules too (`guard`)
            return INSTRUCTIONS

        return assistant

    return make


@dataclass
class _Session:
    """One ACP session: its flue_nb session and the prompt running now."""

    session: Session
    cwd: str
    live: str | None = None
    """The submission of the prompt running now."""
    asking: set[asyncio.Future[Any]] = field(default_factory=set)


def mcp_mounts(servers: list[Any] | None) -> list[dict[str, Any]]:
    """The client's MCP servers as `use_mcp` arguments: stdio and streamable HTTP ones (SSE and
    ACP-transport servers are not mounted; flue_nb's MCP client speaks neither)."""
    out: list[dict[str, Any]] = []
    taken: set[str] = set()
    for server in servers or []:
        name = re.sub(r"[^A-Za-z0-9_-]+", "_", server.name).strip("_") or "mcp"
        while name in taken:
            name += "_"
        kind = getattr(server, "type", None)
        if kind is None and hasattr(server, "command"):
            env = {e.name: e.value for e in server.env}
            out.append({"name": name, "command": [server.command, *server.args], "env": env})
        elif kind == "http":
            out.append({"name": name, "url": server.url, "headers": {h.name: h.value for h in server.headers}})
        else:
            continue
        taken.add(name)
    return out


def _error(code: int, message: str, **data: Any) -> RequestError:
    return RequestError(code, message, data or None)


def _prompt_text(blocks: list[Any]) -> str:
    """The prompt's text: text blocks as they are, embedded resources as fenced text, links named."""
    parts = []
    for b in blocks:
        kind = getattr(b, "type", None)
        if kind == "text":
            parts.append(b.text)
        elif kind == "resource":
            res = b.resource
            text = getattr(res, "text", None)
            if text is not None:
                parts.append(f"{res.uri}:\n```\n{text}\n```")
        elif kind == "resource_link":
            parts.append(f"[{b.name}]({b.uri})")
    # Blank lines around it carry nothing (jupyter-ai joins an empty preamble to the first prompt).
    return "\n\n".join(p for p in parts if p).strip("\n")


class FlueAcpAgent:
    """The ACP agent side: each ACP method of the `acp.interfaces.Agent` protocol it serves."""

    def __init__(
        self,
        make_agent: AgentFactory,
        *,
        db: str | None = None,
        cwd: str | None = None,
        kernel: KernelTarget | None = None,
        kernel_agents: KernelAgents | None = None,
    ) -> None:
        self._make_agent = make_agent
        self._db = db
        self._cwd = cwd
        self._kernel = kernel
        self._kernel_agents = kernel_agents
        self._named: dict[str, KernelTarget] = {}
        """The kernels sessions named in their `_meta`, by connection file (attached once each)."""
        self._sessions: dict[str, _Session] = {}
        self._conn: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def on_connect(self, conn: Any) -> None:
        """Keep the client side of the connection: updates and permission requests go there."""
        self._conn = conn

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None, **kwargs: Any
    ) -> InitializeResponse:
        """Agree on the protocol version and say what this agent does (load, embedded context)."""
        from flue_nb import __version__

        self._loop = asyncio.get_running_loop()
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True, prompt_capabilities=PromptCapabilities(embedded_context=True)
            ),
            agent_info=Implementation(name="flue_nb", title="flue_nb", version=__version__),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        """Nothing to authenticate: the model's keys come from the environment."""
        return None

    async def new_session(
        self, cwd: str, additional_directories: Any = None, mcp_servers: Any = None, **kwargs: Any
    ) -> NewSessionResponse:
        """A fresh conversation working in `cwd` (or the `--cwd` the agent was started with); with
        a kernel (the agent's, or the one `_meta` names), the conversation that kernel's cells
        continue, working in the kernel."""
        target, make = self._kernel_of(kwargs.get("flue_nb"))
        if target is not None:
            where = await self._attach(target)
            await self._open(where.conversation, where.cwd, mcp_mounts(mcp_servers), db=where.db, make=make)
            return NewSessionResponse(session_id=where.conversation)
        sid = f"acp-{uuid.uuid4().hex[:12]}"
        await self._open(sid, self._cwd or cwd, mcp_mounts(mcp_servers))
        return NewSessionResponse(session_id=sid)

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, additional_directories: Any = None, **kwargs: Any
    ) -> LoadSessionResponse:
        """Reopen a stored conversation (with a kernel: one of the kernel's store) and replay it to
        the client as updates."""
        target, make = self._kernel_of(kwargs.get("flue_nb"))
        if target is not None:
            attached = await self._attach(target)
            mounts = mcp_mounts(mcp_servers)
            s = await self._open(session_id, attached.cwd, mounts, db=attached.db, existing=True, make=make)
        else:
            s = await self._open(session_id, self._cwd or cwd, mcp_mounts(mcp_servers), existing=True)
        events = await asyncio.to_thread(s.session.events)
        paragraphs = Paragraphs()
        for ev in events:
            for update in to_updates(paragraphs(ev), cwd=s.cwd, title=self._title(s), replay=True):
                await self._conn.session_update(session_id, update)
        return LoadSessionResponse()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        """Run one message: its text, thinking and tool calls stream as updates until it settles."""
        s = self._session(session_id)
        if s.live is not None:
            raise _error(-32602, "a prompt is already running in this session", sessionId=session_id)
        text = _prompt_text(prompt)
        if not text.strip():
            raise _error(-32602, "the prompt has no text", sessionId=session_id)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()

        def forward(e: Event) -> None:  # on the runtime's thread
            loop.call_soon_threadsafe(events.put_nowait, e)

        stop = s.session.observe(forward)
        title = self._title(s)
        paragraphs = Paragraphs()
        try:
            receipt = await asyncio.to_thread(s.session.dispatch, text)
            s.live = receipt.submission_id
            while True:
                ev = await events.get()
                if ev.submission_id != receipt.submission_id:
                    continue
                for update in to_updates(paragraphs(ev), cwd=s.cwd, title=title):
                    await self._conn.session_update(session_id, update)
                if isinstance(ev, SubmissionSettled):
                    return self._stop_reason(ev)
        finally:
            stop()
            s.live = None

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """Abort the session's running prompt durably (it settles `aborted`: stop reason `cancelled`)."""
        s = self._sessions.get(session_id)
        if s is None:
            return
        for fut in list(s.asking):
            fut.cancel()  # a permission still asked: the client has dropped it too
        await asyncio.to_thread(s.session.abort)

    # --- approvals ----------------------------------------------------------------------------

    async def approve(self, request: ApprovalRequest) -> bool | Unanswered:
        """The `Approver` of this agent's sessions (runs on the runtime's loop): ask the client,
        and take another view's answer if it comes first (the ballot closes once)."""
        s = self._owner(request)
        if s is None or self._loop is None or self._conn is None:
            return Unanswered("no ACP client shows this call")
        asked = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._ask(s, request), self._loop))
        racing: list[asyncio.Future[Any]] = [asked]
        elsewhere = asyncio.ensure_future(request.ballot.wait()) if request.ballot is not None else None
        if elsewhere is not None:
            racing.append(elsewhere)
        try:
            done, _ = await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in racing:
                if not task.done():
                    task.cancel()
        if elsewhere is not None and elsewhere in done:
            return elsewhere.result().decision
        return asked.result()

    async def _ask(self, s: _Session, request: ApprovalRequest) -> bool | Unanswered:
        """`session/request_permission` for one call (on the ACP loop)."""
        from acp import start_tool_call, text_block, tool_content

        options = list(default_permission_options())
        if request.grant is None:  # "always" is only offered where the rules offer a grant
            options = [o for o in options if o.kind != "allow_always"]
        start = start_tool_call(
            request.call_id,
            request.summary,
            kind=kind_of(request.tool_name),
            status="pending",
            locations=locations_of(request.input, s.cwd),
            content=[tool_content(text_block(request.question))],
            raw_input=request.input,
        )
        from acp.schema import ToolCallUpdate

        call = ToolCallUpdate(**start.model_dump(exclude={"session_update"}))
        task = asyncio.ensure_future(
            self._conn.request_permission(session_id=s.session.conversation_id, tool_call=call, options=options)
        )
        s.asking.add(task)
        try:
            answer: RequestPermissionResponse = await task
        except asyncio.CancelledError:
            return Unanswered("the ACP prompt was cancelled")
        finally:
            s.asking.discard(task)
        outcome = answer.outcome
        if not isinstance(outcome, AllowedOutcome):
            return Unanswered("the ACP client cancelled the request")
        chosen = next((o for o in options if o.option_id == outcome.option_id), None)
        if chosen is None:
            return Unanswered(f"the ACP client chose an option never offered ({outcome.option_id!r})")
        if chosen.kind == "allow_always" and request.grant is not None:
            await asyncio.to_thread(s.session.allow, request.grant.tool, request.grant.pattern)
        return chosen.kind in ("allow_once", "allow_always")

    def _owner(self, request: ApprovalRequest) -> _Session | None:
        """The session a call belongs to: by its ballot's conversation, else the one prompting."""
        if request.ballot is not None:
            return self._sessions.get(request.ballot.conversation_id)
        live = [s for s in self._sessions.values() if s.live is not None]
        return live[0] if len(live) == 1 else None

    # --- sessions -----------------------------------------------------------------------------

    def _session(self, session_id: str) -> _Session:
        s = self._sessions.get(session_id)
        if s is None:
            raise _error(-32602, f"no session {session_id!r}: session/new or session/load it first")
        return s

    def _kernel_of(self, meta: Any) -> tuple[KernelTarget | None, AgentFactory | None]:
        """The kernel a session works in (the one its `_meta` names, else the agent's, else none)
        and the factory of its agent (None: the agent's own)."""
        named = meta.get("kernel") if isinstance(meta, dict) else None
        if not named:
            return self._kernel, None
        if self._kernel is not None:
            raise _error(-32602, "this agent works in the kernel it was started for: a session cannot name another")
        if self._kernel_agents is None:
            raise _error(-32602, "this agent runs its own tools (--agent): a session cannot name a kernel")
        path = str(named)
        target = self._named.get(path)
        if target is None:
            from flue_nb.acp.kernel import KernelTarget

            target = self._named[path] = KernelTarget(connection_file=path)
        return target, self._kernel_agents(target)

    async def _attach(self, target: KernelTarget) -> Any:
        """The kernel's attachment (made at its first session), or a protocol error saying why not."""
        try:
            return await asyncio.to_thread(target.attach)
        except ConfigError as exc:
            raise _error(-32603, f"cannot attach to the kernel: {exc.message}") from None

    def close(self) -> None:
        """Detach from the kernels sessions named (the agent's own `kernel` is its caller's)."""
        for target in self._named.values():
            target.close()
        self._named.clear()

    async def _open(
        self,
        sid: str,
        cwd: str,
        mcp: list[dict[str, Any]],
        *,
        db: str | None = None,
        existing: bool = False,
        make: AgentFactory | None = None,
    ) -> _Session:
        if not os.path.isdir(cwd):
            raise _error(-32602, f"cwd {cwd!r} is not a directory")
        found = self._sessions.get(sid)
        if found is not None:
            return found

        def open_() -> Session:
            agent = (make or self._make_agent)(cwd, self.approve, mcp)
            session = init(agent, conversation=sid, db=db or self._db, cwd=cwd)
            if existing and not session.submissions():
                raise _error(-32002, f"no conversation {sid!r} in the store", sessionId=sid)
            return session

        try:
            session = await asyncio.to_thread(open_)
        except ConfigError as exc:
            raise _error(-32602, exc.message) from None
        s = self._sessions[sid] = _Session(session, os.path.abspath(cwd))
        return s

    def _title(self, s: _Session) -> Callable[[str, Mapping[str, Any]], str]:
        def title(name: str, data: Mapping[str, Any]) -> str:
            line = s.session.summaries.line(name, data)
            return f"{name}: {line}" if line else name

        return title

    def _stop_reason(self, ev: SubmissionSettled) -> PromptResponse:
        if ev.outcome == "completed":
            return PromptResponse(stop_reason="end_turn")
        if ev.outcome == "aborted":
            return PromptResponse(stop_reason="cancelled")
        err = ev.error
        if err is not None and err.type == "turn_limit_exceeded":
            return PromptResponse(stop_reason="max_turn_requests")
        raise _error(-32603, err.message if err else "the run failed", type=err.type if err else "run_error")


def serve(
    make_agent: AgentFactory,
    *,
    db: str | None = None,
    cwd: str | None = None,
    kernel: KernelTarget | None = None,
    kernel_agents: KernelAgents | None = None,
) -> None:
    """Serve ACP on stdin/stdout until the client closes it (then detach from `kernel` and from the
    kernels sessions named, if any). `kernel_agents` lets a session name its kernel in `_meta`."""
    from flue_nb.notebook.kernel.approve import use_host_approver

    server = FlueAcpAgent(make_agent, db=db, cwd=cwd, kernel=kernel, kernel_agents=kernel_agents)
    # An --agent's own `flue.kernel(approval="ask")` asks this client too.
    stop = use_host_approver(server.approve)
    try:
        asyncio.run(_serve_stdio(server))
    finally:
        stop()
        server.close()
        if kernel is not None:
            kernel.close()


async def _serve_stdio(server: FlueAcpAgent) -> None:
    """`run_agent` on stdin and on a private copy of stdout: file descriptor 1 itself is pointed
    at stderr, so a stray print (a tool's, a library's) can never corrupt the protocol stream."""
    import sys

    from acp import stdio_streams

    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    real, sys.stdout = sys.stdout, protocol_out
    try:
        reader, writer = await stdio_streams()
    finally:
        sys.stdout = real
    # Methods the agent leaves out (session/list, modes, fork) are answered "method not found".
    await run_agent(cast("Agent", server), writer, reader)
