"""The live kernel as an MCP server (`%flue serve`, `flue.serve()`): outside agents call its tools.

`serve()` offers the kernel sandbox's tools (`python`, the notebook tools, the six file and shell
tools) over streamable HTTP on loopback, behind a random bearer token. Each call is recorded as a
submission of a conversation (`_calls`), its code runs on the kernel's main thread between cells
(`_main_thread`), and the HTTP side is the official SDK behind a token and Origin guard (`_http`).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import json
import os
import secrets
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flue_nb.notebook.kernel.sandbox import KernelSandbox
from flue_nb.notebook.serve._calls import REFUSED, CallOutcome, Gate, Recorder
from flue_nb.notebook.serve._main_thread import CALL, MainThread
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.sandbox.contain import SandboxLevel
from flue_nb.runtime.tools.approval import ApprovalPolicy
from flue_nb.runtime.tools.tool import Tool, ToolContext, call_run

if TYPE_CHECKING:
    from flue_nb.runtime.agent import AgentDef

__all__ = ["Gate", "Served", "ServeStatus", "current", "serve", "stop"]

DEFAULT_BUSY_TIMEOUT = 30.0
"""Seconds a call waits for a running cell to end before it says the kernel is busy."""
_STATE_FILE = os.path.join(".flue", "serve.json")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")

_lock = threading.Lock()
_current: Served | None = None


@dataclass(frozen=True, slots=True)
class ServeStatus:
    """Where a served kernel stands (`%flue serve status`)."""

    running: bool
    url: str
    tools: tuple[str, ...]
    approval: str
    calls: int
    """Calls received since the server started."""
    conversations: tuple[str, ...]
    """The conversations calls were recorded in so far."""
    started_at: float


class _Offered(KernelSandbox):
    """The kernel sandbox with its tool list chosen (`--tools`) and built once."""

    def __init__(self, cwd: str, names: Sequence[str] | None, **kwargs: Any) -> None:
        super().__init__(cwd, **kwargs)
        self._names = list(names) if names is not None else None
        self._offered: list[Tool] | None = None

    def tools(self) -> list[Tool]:
        """The chosen tools, in the kernel sandbox's order, each with its approval policy."""
        if self._offered is None:
            everything = super().tools()
            if self._names is None:
                self._offered = everything
            else:
                known = [t.name for t in everything]
                unknown = [n for n in self._names if n not in known]
                if unknown:
                    raise ConfigError(f"--tools names unknown tools {unknown}; this kernel offers {known}")
                self._offered = [t for t in everything if t.name in self._names]
            self._offered = [_marked(t) for t in self._offered]
        return self._offered


def _marked(tool: Tool) -> Tool:
    """`tool`, telling the main-thread runner which call (and conversation) its code is for."""

    async def run(args: Any, ctx: ToolContext) -> Any:
        refused = REFUSED.pop(ctx.call_id, None)
        if refused is not None:  # its gate said no (`Served.grant`): recorded, not run
            return refused
        token = CALL.set((ctx.call_id, ctx.conversation_id))
        try:
            return await call_run(tool, args, ctx)
        finally:
            CALL.reset(token)

    return dataclasses.replace(tool, run=run)


class Served:
    """A running MCP server of this kernel: `url`, `token`, `status()`, `stop()`."""

    def __init__(self, endpoint: Any, recorder: Recorder, token: str, approval: str, gates: dict[str, Gate]) -> None:
        self._endpoint = endpoint
        self._recorder = recorder
        self.token = token
        """The bearer token every request must carry (`Authorization: Bearer <token>`)."""
        self.approval = approval
        self.started_at = time.time()
        self._gates = gates

    def grant(self, gate: Gate) -> str:
        """A new bearer token whose every call runs only if `gate(tool, arguments)` returns None
        (else it is recorded refused with what it returned): for a client this kernel hosts."""
        token, holder = secrets.token_urlsafe(32), secrets.token_hex(8)
        self._gates[holder] = gate
        self._endpoint.guard.admit(token, holder)
        return token

    def revoke(self, token: str) -> None:
        """Refuse a token `grant` made from now on (and forget its gate)."""
        holder = self._endpoint.guard.revoke(token)
        if holder:
            self._gates.pop(holder, None)

    @property
    def url(self) -> str:
        """The endpoint clients connect to (`http://127.0.0.1:PORT/mcp`)."""
        url: str = self._endpoint.url
        return url

    @property
    def port(self) -> int:
        """The TCP port served."""
        port: int = self._endpoint.port
        return port

    def status(self) -> ServeStatus:
        """Whether it serves, what, and how many calls it has had."""
        return ServeStatus(
            running=self._endpoint.running,
            url=self.url,
            tools=tuple(self._recorder.tools),
            approval=self.approval,
            calls=self._recorder.calls,
            conversations=tuple(self._recorder.conversations()),
            started_at=self.started_at,
        )

    def stop(self) -> None:
        """Stop serving; calls already recorded stay in their conversations."""
        global _current
        self._endpoint.stop()
        with _lock:
            if _current is self:
                _current = None

    def client_config(self, name: str = "flue-kernel") -> str:
        """Ready-to-paste configuration: a `claude mcp add` line and an `.mcp.json` block."""
        header = f"Authorization: Bearer {self.token}"
        block = {
            "mcpServers": {
                name: {"type": "http", "url": self.url, "headers": {"Authorization": f"Bearer {self.token}"}}
            }
        }
        return (
            f'Claude Code:\n  claude mcp add --transport http {name} {self.url} --header "{header}"\n'
            f".mcp.json (Claude Code, Cursor and other clients that read it):\n"
            + "\n".join("  " + line for line in json.dumps(block, indent=2).splitlines())
        )

    def __repr__(self) -> str:
        state = "serving" if self._endpoint.running else "stopped"
        return f"<flue_nb MCP server {state} at {self.url}>"


def current() -> Served | None:
    """The server this kernel runs, if any."""
    with _lock:
        return _current if _current is not None and _current._endpoint.running else None


def stop() -> bool:
    """Stop this kernel's server; True if one was running."""
    served = current()
    if served is None:
        return False
    served.stop()
    return True


def serve(
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    approval: ApprovalPolicy | Mapping[str, Any] | str = "allow",
    tools: Sequence[str] | None = None,
    conversation: str | None = None,
    db: str | None = None,
    cwd: str | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    approval_timeout: float | None = None,
    namespace: dict[str, Any] | None = None,
    on_session: Callable[[str, Any, Any], None] | None = None,
    shown_in: str | None = None,
    sandbox: SandboxLevel = "auto",
    allow_hosts: Sequence[str] | None = None,
    hide_paths: Sequence[str] | None = None,
) -> Served:
    """Serve this kernel's tools over MCP (streamable HTTP) and return the running server.

    Args:
        port: The TCP port; None reuses the last one served from this directory when free,
            else any free port.
        host: Where to listen; loopback unless you say otherwise (then a warning: anyone who
            can reach the port and holds the token runs code in this kernel).
        approval: `allow`, `ask` or `deny` for the tools that change something, or approval
            rules (as for `flue.kernel()`).
        tools: The tool names to offer (default: all of the kernel sandbox's).
        conversation: The conversation every call is recorded in; default `mcp:<client name>`.
        db: The store (as for `flue.init`); default `$FLUE_DB`, else `.flue/flue.sqlite`.
        cwd: The working directory of the file and shell tools (default: the current one).
        busy_timeout: Seconds a call waits for a running cell before saying the kernel is busy.
        approval_timeout: Seconds an `ask` waits for a chat's answer before the fallback (deny).
        namespace: Where `python` runs code; default IPython's `user_ns`.
        on_session: Called with `(conversation id, agent, session)` when a conversation opens.
        shown_in: The conversation the calls are made for, when one client runs it elsewhere (an
            attached `flue-nb acp`): its chats here show a call holding the main thread as theirs,
            and their Stop aborts that conversation too.
        sandbox, allow_hosts, hide_paths: Where `bash` runs, as for `flue.kernel()` (contained by
            default).
    """
    global _current
    from flue_nb.runtime.tools.rules import ApprovalRules

    rules = ApprovalRules.of(approval)  # a ConfigError saying what it takes
    if not isinstance(busy_timeout, (int, float)) or busy_timeout <= 0:
        raise ConfigError(f"busy_timeout must be a positive number of seconds, got {busy_timeout!r}")
    if port is not None and (not isinstance(port, int) or not 0 <= port <= 65535):
        raise ConfigError(f"port must be an int from 0 to 65535, got {port!r}")
    running = current()
    if running is not None:
        raise ConfigError(
            f"this kernel already serves at {running.url}; `%flue serve stop` (or `.stop()` on what serve() returned) first"
        )
    try:
        import mcp  # noqa: F401 - the endpoint imports it only when built: say so here, in our words

        from flue_nb.notebook.serve._http import Endpoint
    except ImportError as exc:
        raise ConfigError(f"serving needs the MCP SDK: pip install 'flue_nb[mcp]' ({exc})") from None
    if host not in _LOOPBACK:
        warnings.warn(
            f"flue serve: listening on {host!r}, beyond this machine's loopback: anyone who reaches "
            "the port and holds the token runs code in this kernel",
            stacklevel=2,
        )
    workdir = os.path.abspath(cwd or os.getcwd())
    box = _Offered(
        workdir,
        tools,
        namespace=namespace,
        approval=rules,
        runner=_runner(busy_timeout),
        approval_timeout=approval_timeout,
        sandbox=sandbox,
        allow_hosts=allow_hosts,
        hide_paths=hide_paths,
    )
    token = secrets.token_urlsafe(32)

    def open_session(cid: str, agent: AgentDef) -> Any:
        from flue_nb.runtime.session import init

        session = init(agent, conversation=cid, db=db, cwd=workdir)
        if on_session is not None:
            on_session(cid, agent, session)
        return session

    recorder = Recorder(
        box, open_session, (lambda client: conversation) if conversation else _per_client, busy_timeout=busy_timeout
    )
    recorder.shown_in = shown_in

    gates: dict[str, Gate] = {}

    async def call(client: str, tool: str, arguments: dict[str, Any], holder: str) -> CallOutcome:
        return await recorder.call(client, tool, arguments, gate=gates.get(holder))

    if conversation:
        recorder.session(conversation)  # open now: a `%flue chat -c` on it shows this agent at once
    offered = list(recorder.tools.values())
    endpoint = _endpoint(Endpoint, offered, call, host, port, token, workdir)
    served = Served(endpoint, recorder, token, approval if isinstance(approval, str) else rules.describe(), gates)
    with _lock:
        _current = served
    if isinstance(box._runner, MainThread):
        from flue_nb.notebook.serve import _stop

        _stop.install(recorder)  # the chat's Stop reaches a call holding the main thread
    _remember(workdir, endpoint.port)
    return served


def _per_client(client: str) -> str:
    return f"mcp:{client}"


def _runner(busy_timeout: float) -> MainThread:
    """The kernel's main thread when called from it (a cell), else a thread of serve's own.

    Either way one call's code runs at a time, on the same thread each time, and a call that
    cannot start within `busy_timeout` (one that never ends holds it) says the kernel is busy.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return MainThread(_code_loop(), busy_timeout)
    if threading.current_thread() is not threading.main_thread():
        return MainThread(_code_loop(), busy_timeout)
    return MainThread(loop, busy_timeout)


_code: asyncio.AbstractEventLoop | None = None


def _code_loop() -> asyncio.AbstractEventLoop:
    """The loop of the thread outside calls' code runs on when no kernel serves them (kept for
    the process: objects a call makes may be bound to the thread that made them)."""
    global _code
    with _lock:
        if _code is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="flue-serve-code", daemon=True).start()
            _code = loop
        return _code


def _endpoint(cls: Any, tools: list[Tool], call: Any, host: str, port: int | None, token: str, cwd: str) -> Any:
    if port is not None:
        try:
            return cls(tools, call, host=host, port=port, token=token)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port"
            ) from None
    last = _remembered(cwd)
    if last:
        try:
            return cls(tools, call, host=host, port=last, token=token)
        except OSError:
            pass  # taken by now: any free port will do
    return cls(tools, call, host=host, port=0, token=token)


def _remembered(cwd: str) -> int | None:
    try:
        with open(os.path.join(cwd, _STATE_FILE)) as f:
            port = json.load(f).get("port")
    except (OSError, ValueError, AttributeError):
        return None
    return port if isinstance(port, int) and 0 < port <= 65535 else None


def _remember(cwd: str, port: int) -> None:
    """Keep the port so the next `%flue serve` here (after a restart) takes the same one."""
    path = os.path.join(cwd, _STATE_FILE)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"port": port}, f)
    except OSError:
        pass  # a read-only directory: the next start picks any free port


@atexit.register
def _stop_at_exit() -> None:
    stop()
