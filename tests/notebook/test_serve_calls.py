"""`flue.serve()` in this process, driven by the official `mcp` client: what real clients send.

Parallel calls in one session (Claude Code sends them), many clients under one name, a client
that goes away mid-call, a call to a tool the kernel lacks, `stop()` during a call, and a call
that never ends (issue 32.6).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from typing import Any

import pytest

import flue_nb as flue
from flue_nb.runtime.store import Outcome

pytest.importorskip("mcp")

BUSY = 1.0


def _serve(tmp_path, busy: float) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    sessions: dict[str, Any] = {}
    namespace: dict[str, Any] = {"ran": []}
    served = flue.serve(
        namespace=namespace,
        db=str(tmp_path / "s.sqlite"),
        cwd=str(tmp_path),
        busy_timeout=busy,
        sandbox="none",
        on_session=lambda cid, agent, session: sessions.__setitem__(cid, session),
    )
    (tmp_path / "a.txt").write_text("alpha\n")
    return served, namespace, sessions


@pytest.fixture
def served(tmp_path):
    """A server whose calls wait for a busy conversation or code thread at most `BUSY` s."""
    served = _serve(tmp_path, BUSY)
    yield served
    served[1]["release"] = True
    served[0].stop()
    _code_thread_free()


def _code_thread_free(limit: float = 15.0) -> bool:
    """Wait until no served call's code holds the code thread (one test's call must not make the
    next test's busy); True if it was freed within `limit` s."""
    import time

    from flue_nb.notebook.serve._main_thread import holding

    end = time.monotonic() + limit
    while holding() is not None and time.monotonic() < end:
        time.sleep(0.02)
    return holding() is None


@pytest.fixture
def patient(tmp_path):
    """A server with the default wait (30 s): calls that queue get their turn."""
    served = _serve(tmp_path, 30.0)
    yield served
    served[0].stop()


async def _open(url: str, token: str, client: str, steps: Any) -> Any:
    import mcp.types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    info = types.Implementation(name=client, version="1.0")
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, client_info=info) as session,
    ):
        await session.initialize()
        return await steps(session)


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def outcomes(session: Any) -> list[str]:
    """Each recorded call's outcome, in admission order."""
    return [s.outcome.value if s.outcome else s.state.value for s in session.store.submissions(session.conversation_id)]


def test_parallel_calls_in_one_session_all_run_and_each_record_is_true(patient):
    # Four calls at once in one session: before, two were answered "the run ended without running
    # it" yet recorded `completed`.
    served, ns, sessions = patient

    async def steps(s):
        calls = [s.call_tool("python", {"code": f"import time\ntime.sleep(0.2)\nran.append({i})"}) for i in range(4)]
        return await asyncio.gather(*calls)

    results = asyncio.run(_open(served.url, served.token, "claude-code", steps))
    assert [r.is_error for r in results] == [False] * 4, [text(r) for r in results]
    assert sorted(ns["ran"]) == [0, 1, 2, 3]
    assert outcomes(sessions["mcp:claude-code"]) == ["completed"] * 4


def test_many_clients_under_one_name_each_call_runs_once(patient):
    served, ns, sessions = patient

    async def one_client(k: int) -> list[Any]:
        async def steps(s):
            return await asyncio.gather(*(s.call_tool("read", {"path": "a.txt"}) for _ in range(2)))

        return await _open(served.url, served.token, "shared-name", steps)

    async def everyone():
        return await asyncio.gather(*(one_client(k) for k in range(8)))

    results = [r for pair in asyncio.run(everyone()) for r in pair]
    texts = [text(r) for r in results]
    refused = [t for r, t in zip(results, texts, strict=True) if r.is_error]
    done = outcomes(sessions["mcp:shared-name"])
    # Every call either ran (its result, a completed record) or was refused as busy (a failed
    # record saying so): never an answer that disagrees with its record.
    assert all("alpha" in t for r, t in zip(results, texts, strict=True) if not r.is_error), texts
    assert all("busy" in t for t in refused), refused
    assert done.count("completed") == len(results) - len(refused)
    assert done.count("failed") == len(refused)
    assert len(done) == len(results) == 16


def test_a_call_to_an_unknown_tool_is_recorded(served):
    served, _, sessions = served

    async def steps(s):
        return await s.call_tool("no_such_tool", {"x": 1})

    result = asyncio.run(_open(served.url, served.token, "prober", steps))
    assert result.is_error and "no_such_tool" in text(result)
    session = sessions["mcp:prober"]
    [sub] = session.store.submissions(session.conversation_id)
    assert "no_such_tool" in sub.text and sub.outcome == Outcome.FAILED


def test_a_call_waiting_behind_a_never_ending_one_is_told_busy_and_recorded_so(served):
    served, ns, sessions = served
    started = threading.Event()
    ns["started"] = started
    forever = "started.set()\nimport time\nwhile not globals().get('release'):\n    time.sleep(0.02)"

    async def steps(s):
        hold = asyncio.ensure_future(s.call_tool("python", {"code": forever}))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        # The same client (its conversation is busy) and another client (the code thread is).
        same = await s.call_tool("read", {"path": "a.txt"})
        other = await _open(
            served.url, served.token, "other", lambda o: o.call_tool("python", {"code": "ran.append('x')"})
        )
        ns["release"] = True
        return await hold, same, other

    held, same, other = asyncio.run(_open(served.url, served.token, "holder", steps))
    assert not held.is_error, text(held)
    assert same.is_error and "busy" in text(same), text(same)
    assert other.is_error and "busy" in text(other), text(other)
    assert "x" not in ns["ran"]
    assert outcomes(sessions["mcp:holder"]) == ["completed", "failed"]
    [refused] = [s for s in sessions["mcp:holder"].store.submissions("mcp:holder") if s.outcome == Outcome.FAILED]
    assert "busy" in (refused.error or {}).get("message", "")


def _raw(served: Any, body: dict[str, Any], session_id: str | None = None) -> tuple[bytes, socket.socket]:
    """One JSON-RPC POST on a socket of its own: the request bytes sent, the socket open."""
    payload = json.dumps(body).encode()
    head = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{served.port}",
        f"Authorization: Bearer {served.token}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        "MCP-Protocol-Version: 2025-11-25",
        f"Content-Length: {len(payload)}",
    ]
    if session_id:
        head.append(f"Mcp-Session-Id: {session_id}")
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=30)
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
    return payload, sock


def _answer(sock: socket.socket) -> str:
    data = b""
    while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < _length(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    return data.decode()


def _length(data: bytes) -> int:
    for line in data.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def test_a_client_that_disconnects_mid_call_cancels_it(served):
    # Before: the call ran to its end (JSON responses read nothing more from the connection).
    served, ns, sessions = served
    started = threading.Event()
    ns["started"] = started
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "leaver", "version": "1"}}
    _, sock = _raw(served, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
    answer = _answer(sock)
    session_id = next(
        line.split(":", 1)[1].strip() for line in answer.split("\r\n") if line.lower().startswith("mcp-session-id:")
    )
    _, sock = _raw(served, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session_id)
    _answer(sock)
    slow = "started.set()\nimport time\nfor _ in range(500):\n    time.sleep(0.02)\nran.append('finished')"
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "python", "arguments": {"code": slow}},
    }
    _, sock = _raw(served, call, session_id)
    assert started.wait(30)
    sock.close()  # the client goes away: no cancellation sent, the connection simply ends
    session = sessions["mcp:leaver"]
    [sub] = session.store.submissions(session.conversation_id)
    settled = session.wait(sub.id, timeout=30)
    assert settled.outcome == Outcome.ABORTED
    # Read once the code has let go of its thread: an abort that missed the code left it
    # running past the record's settling, and it appended later.
    assert _code_thread_free()
    assert "finished" not in ns["ran"]


def test_a_call_cancelled_just_as_its_code_starts_is_interrupted():
    # The cancellation lands after the code took its thread but before the waiting coroutine
    # saw it start. Python 3.11's `wait_for` then returned instead of raising: the abort was
    # lost and the code ran to its end (a client disconnecting mid-call, about half the time).
    import time

    from flue_nb.notebook.serve._main_thread import MainThread

    code_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=code_loop.run_forever, name="test-code", daemon=True)
    thread.start()
    began, ran = threading.Event(), []

    def code() -> None:
        began.set()
        for _ in range(250):
            time.sleep(0.02)
        ran.append("finished")

    async def main() -> None:
        call = asyncio.ensure_future(MainThread(code_loop, busy_timeout=30)(code))
        await asyncio.sleep(0)  # the call posts its code to the code thread
        # This loop is held until the code runs, so the notice that it started is queued when
        # the cancellation comes: both reach the waiting call together.
        assert began.wait(10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    try:
        asyncio.run(main())
        assert _code_thread_free()
        assert ran == []
    finally:
        code_loop.call_soon_threadsafe(code_loop.stop)
        thread.join(10)
        code_loop.close()


def test_a_call_cancelled_just_as_its_turn_comes_passes_the_turn_on():
    # As above, for a call waiting behind another in its conversation: cancelled after its turn
    # had been handed over but before it resumed, it took the turn and ran although its client
    # had gone. The cancellation is tried at each point of the hand-over, a loop step apart.
    from flue_nb.notebook.serve._calls import _Turns

    async def cancelled_after(hops: int) -> tuple[bool, bool, bool]:
        turns = _Turns()
        assert await turns.take("c", 1)
        waiting = asyncio.ensure_future(turns.take("c", 30))
        await asyncio.sleep(0)  # it queues behind the holder
        loop, cancelled = asyncio.get_running_loop(), asyncio.Event()

        def hop(left: int) -> None:
            if left:
                loop.call_soon(hop, left - 1)
            elif waiting.cancel():
                cancelled.set()

        turns.give("c")  # the turn is handed over: the waiting call resumes a few steps later
        loop.call_soon(hop, hops)
        try:
            took = await waiting
        except asyncio.CancelledError:
            took = False
        if took:
            turns.give("c")
        return cancelled.is_set(), took, await turns.take("c", 0.1)

    for hops in range(8):
        cancelled, took, free = asyncio.run(cancelled_after(hops))
        assert not (cancelled and took), f"cancelled {hops} loop steps after the hand-over, it took the turn"
        assert free, "the cancelled call kept the turn"


def test_stop_during_a_call_answers_the_client_with_a_json_rpc_error(served, capfd):
    from mcp.shared.exceptions import MCPError

    served, ns, sessions = served
    started = threading.Event()
    ns["started"] = started
    slow = "started.set()\nimport time\nfor _ in range(500):\n    time.sleep(0.02)\nran.append('finished')"
    # uvicorn prints through its own loggers, set up when serving starts (capfd does not see
    # their stream): what they log is read here.
    logged = _Logged()
    logging.getLogger("uvicorn").addHandler(logged)

    async def steps(s):
        call = asyncio.ensure_future(s.call_tool("python", {"code": slow}))
        assert await asyncio.get_running_loop().run_in_executor(None, started.wait, 10), "the call's code never ran"
        # The client still holds its event stream (the GET every session opens): stop used to
        # wait for it, then cut it off with uvicorn's tracebacks on stderr.
        await asyncio.get_running_loop().run_in_executor(None, served.stop)
        try:
            answered = await call
        except MCPError as exc:
            return exc
        return answered  # the assertion below shows what came back instead of the error

    try:
        error = asyncio.run(_open(served.url, served.token, "stopper", steps))
    finally:
        logging.getLogger("uvicorn").removeHandler(logged)
    assert isinstance(error, MCPError) and "stopped serving" in str(error), error
    assert "finished" not in ns["ran"]
    assert "Traceback" not in capfd.readouterr().err
    assert [r.getMessage() for r in logged.records if r.levelno >= logging.ERROR] == []


class _Logged(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_token_granted_with_a_gate_runs_only_what_the_gate_lets_through(served):
    # What a hosted ACP agent gets (`Served.grant`): its calls pass the gate first; the server's
    # own token does not, and a revoked grant is refused at the door.
    import httpx2

    from flue_nb.runtime.facts import ApprovalFacts
    from flue_nb.runtime.tools.tool import ToolOutput

    served, ns, sessions = served
    asked: list[tuple[str, dict[str, Any]]] = []

    async def gate(tool: Any, arguments: dict[str, Any]) -> ToolOutput | None:
        asked.append((tool.name, arguments))
        if "no" in arguments.get("code", ""):
            return ToolOutput("Not run: declined.", is_error=True, approval=ApprovalFacts("declined", approved=False))
        return None

    token = served.grant(gate)

    def call(tok: str, code: str) -> Any:
        return asyncio.run(_open(served.url, tok, "hosted", lambda s: s.call_tool("python", {"code": code})))

    refused = call(token, "ran.append('no')")
    allowed = call(token, "ran.append('yes')")
    own = call(served.token, "ran.append('own, no gate')")
    assert refused.is_error and text(refused) == "Not run: declined.", text(refused)
    assert not allowed.is_error and not own.is_error
    assert ns["ran"] == ["yes", "own, no gate"]  # the refused call's code never ran
    assert [a for _, a in asked] == [{"code": "ran.append('no')"}, {"code": "ran.append('yes')"}]
    # Each call is recorded, the refused one with its refusal as its result, and its approval facts.
    session = sessions["mcp:hosted"]
    assert outcomes(session) == ["completed"] * 3
    from flue_nb.runtime.events import ToolEnd

    ended = [e for e in session.events() if isinstance(e, ToolEnd)]
    assert [e.is_error for e in ended] == [True, False, False]
    facts = ended[0].approval
    assert facts is not None and facts.reason == "declined" and facts.approved is False, ended[0]
    served.revoke(token)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    with httpx2.Client(trust_env=False, timeout=10) as client:
        assert client.post(served.url, json=body, headers=headers).status_code == 401
    served.revoke(served.token)  # the server's own token is never revoked
    assert not call(served.token, "ran.append('still')").is_error
