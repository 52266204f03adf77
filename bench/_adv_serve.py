"""`flue.serve()` (issue 32.6) attacked by real MCP clients: parallel calls in one session, many
clients under one name, calls to tools it does not offer, clients that disconnect mid-call and
`stop()` during a call. The server runs in this process as `tests/notebook/test_serve_calls.py`
runs it (its calls' code on serve's own code thread).

Counted: a call whose store record disagrees with what its client got (a result, a refusal or an
error), a refused call recorded `completed`, a call with no record or with its code run twice,
and a call whose client went away (or that `stop()` cut short) whose code still ran to its end.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _adv import Counts, Tracebacks, bounded

SLOW = "started.set()\nimport time\nfor _ in range(150):\n    time.sleep(0.02)\nran.append({mark!r})  # {mark}"
"""Code that runs 3 s, then says it finished (`started` is set as it begins)."""
_MARK = re.compile(r"# (call-\d+)")
UVICORN = Tracebacks()
"""uvicorn's records with a traceback, kept while a scenario serves."""


class _Server:
    """One `flue.serve()` for a scenario: its namespace, its sessions, and each call's record."""

    def __init__(self, busy: float) -> None:
        import flue_nb as flue

        self.tmp = tempfile.TemporaryDirectory()
        self.sessions: dict[str, Any] = {}
        self.ns: dict[str, Any] = {"ran": [], "started": threading.Event()}
        self.served = flue.serve(
            namespace=self.ns,
            db=f"{self.tmp.name}/s.sqlite",
            cwd=self.tmp.name,
            busy_timeout=busy,
            sandbox="none",
            on_session=lambda cid, agent, session: self.sessions.__setitem__(cid, session),
        )
        # uvicorn's loggers stop at "uvicorn" (they do not reach the root logger `run` watches),
        # and serving configures them afresh: a traceback it prints on stderr is counted here.
        logging.getLogger("uvicorn").addHandler(UVICORN)

    def records(self, client: str) -> dict[str, Any]:
        """The call marked `call-N` in each of `client`'s records -> that record."""
        session = self.sessions.get(f"mcp:{client}")
        if session is None:
            return {}
        out = {}
        for sub in session.store.submissions(session.conversation_id):
            found = _MARK.search(sub.text)
            out[found.group(1) if found else sub.id] = sub
        return out

    def close(self) -> None:
        from flue_nb.notebook.serve._main_thread import holding

        self.served.stop()
        logging.getLogger("uvicorn").removeHandler(UVICORN)
        end = time.monotonic() + 10
        while holding() is not None and time.monotonic() < end:
            time.sleep(0.02)  # the next scenario must not find the code thread held
        self.tmp.cleanup()


async def _client(url: str, token: str, name: str, steps: Callable[[Any], Awaitable[Any]]) -> Any:
    import mcp.types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, client_info=types.Implementation(name=name, version="1")) as session,
    ):
        await session.initialize()
        return await steps(session)


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in getattr(result, "content", []))


def _check(c: Counts, where: str, server: _Server, client: str, got: dict[str, Any]) -> None:
    """Each call's answer (`got`: mark -> result or exception) against its record and `ran`."""
    records = server.records(client)
    ran = server.ns["ran"]
    for mark, answer in got.items():
        sub = records.get(mark)
        outcome = sub.outcome.value if sub is not None and sub.outcome is not None else None
        refused = isinstance(answer, BaseException) or (answer.is_error and "did not run" in _text(answer))
        if sub is None or outcome is None:
            c.add("lost", f"{where}: {mark} has no settled record")
        elif not refused and not answer.is_error and outcome != "completed":
            c.add("untrue", f"{where}: {mark} answered with its result, recorded {outcome}")
        elif refused and outcome == "completed":
            c.add("untrue", f"{where}: {mark} refused ({_text(answer)[:60]!r}), recorded completed")
        if ran.count(mark) > 1:
            c.add("duplicated", f"{where}: {mark} ran {ran.count(mark)} times")
        if refused and not isinstance(answer, BaseException) and mark in ran:
            c.add("untrue", f"{where}: {mark} refused, yet its code ran")
        if not refused and not answer.is_error and mark not in ran:
            c.add("untrue", f"{where}: {mark} answered, yet its code never ran")


def _calls_at_once(c: Counts, name: str, busy: float, clients: int, per_client: int, code: str) -> None:
    """`clients` clients under one name, each sending `per_client` python calls at once."""
    c.scenarios += 1
    server = _Server(busy)
    marks = iter(range(10_000))
    try:

        async def one(k: int) -> dict[str, Any]:
            mine = [f"call-{next(marks)}" for _ in range(per_client)]

            async def steps(s: Any) -> list[Any]:
                calls = [s.call_tool("python", {"code": code.format(mark=m)}) for m in mine]
                return await asyncio.gather(*calls, return_exceptions=True)

            return dict(zip(mine, await _client(server.served.url, server.served.token, "shared", steps)))

        async def everyone() -> dict[str, Any]:
            got: dict[str, Any] = {}
            for part in await asyncio.gather(*(one(k) for k in range(clients))):
                got.update(part)
            return got

        ended, got, exc = bounded(lambda: asyncio.run(everyone()), 120)
        if not ended:
            c.add("hangs", name)
            return
        if exc is not None:
            c.add("tracebacks", f"{name}: {type(exc).__name__}: {exc}")
            return
        refused = sum(1 for a in got.values() if isinstance(a, BaseException) or a.is_error)
        c.notes.append(f"{name}: {len(got)} calls, {refused} refused or failed, {len(server.ns['ran'])} ran")
        _check(c, name, server, "shared", got)
        if len(server.records("shared")) != len(got):
            c.add("lost", f"{name}: {len(server.records('shared'))} records for {len(got)} calls")
    finally:
        server.close()


def _unknown_tools(c: Counts) -> None:
    name = "calls to tools the kernel does not offer"
    c.scenarios += 1
    server = _Server(1.0)
    tools = ["no_such_tool", "python ", "`read`\nIGNORE", ""]
    try:

        async def steps(s: Any) -> list[Any]:
            return [await s.call_tool(t, {"code": f"ran.append('call-{i}')  # call-{i}"}) for i, t in enumerate(tools)]

        ended, got, exc = bounded(
            lambda: asyncio.run(_client(server.served.url, server.served.token, "prober", steps)), 60
        )
        if not ended:
            c.add("hangs", name)
            return
        if exc is not None:
            c.add("tracebacks", f"{name}: {type(exc).__name__}: {exc}")
            return
        records = server.records("prober")
        for i, answer in enumerate(got):
            mark = f"call-{i}"
            sub = records.get(mark)
            if not answer.is_error:
                c.add("untrue", f"{name}: {tools[i]!r} answered without an error")
            if sub is None:
                c.add("untrue", f"{name}: the call to {tools[i]!r} is not recorded")
            elif sub.outcome is None or sub.outcome.value != "failed":
                c.add("untrue", f"{name}: the call to {tools[i]!r} recorded {sub.outcome}")
        c.notes.append(f"{name}: {len(records)} of {len(tools)} recorded, all refused: {all(a.is_error for a in got)}")
    finally:
        server.close()


def _raw(port: int, token: str, body: dict[str, Any], session_id: str | None = None) -> socket.socket:
    """One JSON-RPC POST on a socket of its own, left open."""
    payload = json.dumps(body).encode()
    head = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        f"Authorization: Bearer {token}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        "MCP-Protocol-Version: 2025-11-25",
        f"Content-Length: {len(payload)}",
    ] + ([f"Mcp-Session-Id: {session_id}"] if session_id else [])
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
    return sock


def _read_all(sock: socket.socket) -> str:
    data = b""
    while True:
        head, sep, rest = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(v)
                for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                if k.strip().lower() == b"content-length"
            ),
            None,
        )
        if sep and length is not None and len(rest) >= length:
            break
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    return data.decode(errors="replace")


def _disconnects(c: Counts, times: int) -> None:
    """A client that sends a slow call, then closes its connection once the code has started."""
    name = "clients that disconnect mid-call"
    server = _Server(5.0)
    port, token = server.served.port, server.served.token
    ran_on = 0
    try:
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "leaver", "version": "1"}}
        answer = _read_all(_raw(port, token, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}))
        sid = next(
            line.split(":", 1)[1].strip() for line in answer.split("\r\n") if line.lower().startswith("mcp-session-id:")
        )
        _read_all(_raw(port, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid))
        for k in range(times):
            c.scenarios += 1
            mark = f"call-{k}"
            server.ns["started"] = started = threading.Event()
            call = {"jsonrpc": "2.0", "id": 2 + k, "method": "tools/call"}
            call["params"] = {"name": "python", "arguments": {"code": SLOW.format(mark=mark)}}
            sock = _raw(port, token, call, sid)
            if not started.wait(30):
                c.add("hangs", f"{name}: {mark}'s code never started")
                sock.close()
                continue
            sock.close()  # gone: no cancellation sent, the connection simply ends
            sub = _settled(server, "leaver", mark)
            _code_thread_free()
            if mark in server.ns["ran"]:
                ran_on += 1
                c.add("ran on", f"{name}: {mark}'s code ran to its end after its client left")
            if sub is None:
                c.add("lost", f"{name}: {mark} has no settled record")
            elif sub.outcome.value != "aborted":
                c.add("untrue", f"{name}: {mark} recorded {sub.outcome.value}, its client gone mid-call")
        c.notes.append(f"{name}: {ran_on} of {times} ran to their end")
    finally:
        server.close()


def _settled(server: _Server, client: str, mark: str, limit: float = 30.0) -> Any:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        sub = server.records(client).get(mark)
        if sub is not None and sub.outcome is not None:
            return sub
        time.sleep(0.02)
    return None


def _code_thread_free(limit: float = 10.0) -> None:
    from flue_nb.notebook.serve._main_thread import holding

    end = time.monotonic() + limit
    while holding() is not None and time.monotonic() < end:
        time.sleep(0.02)


def _stopped(c: Counts) -> None:
    """`stop()` while a call's code runs: the client gets an error, the code does not finish."""
    name = "stop() during a call"
    c.scenarios += 1
    server = _Server(5.0)
    try:

        async def steps(s: Any) -> Any:
            call = asyncio.ensure_future(s.call_tool("python", {"code": SLOW.format(mark="call-0")}))
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, server.ns["started"].wait, 30)
            await loop.run_in_executor(None, server.served.stop)
            try:
                return await call
            except Exception as exc:  # noqa: BLE001 - what the client got
                return exc

        ended, got, exc = bounded(
            lambda: asyncio.run(_client(server.served.url, server.served.token, "stopper", steps)), 60
        )
        if not ended:
            c.add("hangs", name)
            return
        if exc is not None and not _closed_by_stop(exc):
            c.add("tracebacks", f"{name}: {type(exc).__name__}: {exc}")
            return
        _code_thread_free()
        sub = _settled(server, "stopper", "call-0")
        c.notes.append(
            f"{name}: the client got {type(got).__name__}: {str(got)[:80]!r}; recorded {sub.outcome.value if sub else None}"
        )
        if "call-0" in server.ns["ran"]:
            c.add("ran on", f"{name}: the call's code ran to its end")
        if got is not None and not isinstance(got, BaseException) and not got.is_error:
            c.add("untrue", f"{name}: the client got a result")
        if sub is not None and sub.outcome.value == "completed":
            c.add("untrue", f"{name}: recorded completed")
    finally:
        server.close()


def _closed_by_stop(exc: BaseException) -> bool:
    # The session's own teardown after the server went away is the client's business.
    return "ExceptionGroup" in type(exc).__name__ or isinstance(exc, (ConnectionError, OSError))


def serve(quick: bool) -> Counts:
    """Issue 32.6's clients against a real `flue.serve()`."""
    c = Counts(
        "%flue serve (parallel calls, clients, disconnects)",
        ("lost", "duplicated", "hangs", "tracebacks", "untrue", "ran on"),
    )
    quick_code = "ran.append({mark!r})  # {mark}"
    slow_code = "import time\ntime.sleep(0.05)\nran.append({mark!r})  # {mark}"
    first = len(UVICORN.records)
    _calls_at_once(c, "8 calls at once in one session", 30.0, 1, 8, slow_code)
    _calls_at_once(c, "25 clients under one name, 2 calls each at once", 30.0, 25, 2, quick_code)
    _calls_at_once(
        c,
        "10 clients under one name, 2 slow calls each (busy after 1 s)",
        1.0,
        10,
        2,
        slow_code.replace("0.05", "0.3"),
    )
    _unknown_tools(c)
    _disconnects(c, 4 if quick else 10)
    _stopped(c)
    for record in UVICORN.records[first:]:
        c.add("tracebacks", f"uvicorn logged: {record.getMessage().strip().splitlines()[-1][:100]!r}")
    return c
