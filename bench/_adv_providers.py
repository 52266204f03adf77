"""Deadlines (issue 32.5) and hostile OpenAI-compatible servers (32.9, 32.12), through the real
SDKs against loopback servers.

Deadlines: a submission settles within its `timeout` plus the README's 5 s grace, and a model
call within `model_call_timeout` plus the same grace, however the provider stalls (silent before
its headers, silent mid-stream, overloaded every time) and whatever a tool does with the
cancellation. Each case uses seconds-long limits, with the real clock and the real backoff.

Hostile OpenAI-compatible servers: what the README says fails at once (a 200 answer that is not
a stream, a loopback server refusing the connection) is sent once; two tool calls sharing one
id never get two results under that id; `content: null` never reaches a server that answers it
with HTTP 500; an answer stopped by `finish_reason: "length"` says it was cut off.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from _adv import Counts, agent, attempt, bounded

from tests.anthropic_server import AnthropicServer, error, stream, text
from tests.openai_server import OpenAIServer, RawReply, chat, tool_call
from tests.openai_server import error as openai_error
from tests.openai_server import text as chat_text

GRACE = 5.0
"""The README's grace: a submission "settles within its `timeout` plus 5 s"."""
SLACK = 0.1
"""What settling takes once the grace is over (a store write): a submission whose cancelled
attempt ignores the cancellation settles at `timeout` + grace + this, by design."""
STALL = 20.0
"""How long a stalled server stays silent: longer than any limit below plus the grace."""


def _settles_in_time(c: Counts, name: str, a: Any, limit: float, settings: Any = None) -> None:
    """One submission of agent `a`: late if the store has it settle more than `limit` + the
    grace (+ `SLACK`) after it was accepted, a hang if it has not settled long after."""
    import flue_nb as flue

    c.scenarios += 1
    s = flue.init(a, db=":memory:", settings=settings)
    started = time.monotonic()
    receipt = s.dispatch("go")
    ended, sub, exc = bounded(lambda: s.wait(receipt, timeout=limit + GRACE + 30), limit + GRACE + 35)
    if not ended or exc is not None or sub is None or sub.outcome is None or sub.settled_at is None:
        c.add("hangs", f"{name}: not settled after {time.monotonic() - started:.1f} s ({exc!r})")
        return
    took = sub.settled_at - sub.accepted_at
    why = (sub.error or {}).get("type", "")
    c.notes.append(f"{name}: {sub.outcome.value} ({why}) after {took:.2f} s; bound {limit:g} + {GRACE:g} s")
    if took > limit + GRACE + SLACK:
        c.add("late", f"{name}: settled after {took:.2f} s, past {limit:g} + {GRACE:g} s")


def deadlines(quick: bool) -> Counts:
    """Providers that stall and tools that ignore cancellation, under short limits."""
    from flue_nb.models import ScriptedModel, reply
    from flue_nb.models import tool_call as scripted_call
    from flue_nb.runtime.core.loop import RunSettings
    from flue_nb.runtime.providers.anthropic import AnthropicModel
    from flue_nb.runtime.providers.openai import OpenAIModel

    c = Counts("deadlines (stalled providers, stubborn tools)", ("hangs", "late"))
    silent = stream(text("too late"), delay=STALL)
    stalled = stream(text("half an answer"), stall_after=4, stall_seconds=STALL)
    cases: list[tuple[str, list[Any], dict[str, Any], dict[str, Any], float, Any]] = [
        ("Claude silent before its headers (timeout=2)", [silent] * 4, {}, {"timeout": 2}, 2, None),
        ("Claude silent mid-stream (timeout=2)", [stalled] * 4, {}, {"timeout": 2}, 2, None),
        (
            "Claude silent before its headers, each try 0.5 s (timeout=3)",
            [silent] * 20,
            {"request_timeout": 0.5},
            {"timeout": 3},
            3,
            None,
        ),
        (
            "Claude overloaded every time (timeout=3)",
            [error(529, "overloaded_error")] * 40,
            {},
            {"timeout": 3},
            3,
            None,
        ),
        (
            "Claude silent, each try 0.5 s (model_call_timeout=4, timeout=600)",
            [silent] * 20,
            {"request_timeout": 0.5},
            {"timeout": 600},
            4,
            RunSettings(model_call_timeout=4),
        ),
    ]
    for name, replies, model_kw, agent_kw, limit, settings in cases:
        with AnthropicServer() as server:
            server.enqueue(*replies)
            model = AnthropicModel("claude-sonnet-4-6", api_key="test", base_url=server.url, **model_kw)
            _settles_in_time(c, name, agent("deadline", model, **agent_kw), limit, settings)
    for name, answer in [
        ("OpenAI-compatible silent before its headers (timeout=2)", chat(chat_text("late"), delay=STALL)),
        (
            "OpenAI-compatible silent mid-stream (timeout=2)",
            chat(chat_text("half", chunks=4), stall_after=2, stall_seconds=STALL),
        ),
    ]:
        with OpenAIServer() as server:
            server.enqueue(*[answer] * 4)
            model = OpenAIModel("local-model", base_url=server.base_url, api_key="k", context_window=8_192)
            _settles_in_time(c, name, agent("deadline", model, timeout=2), 2)
    for name, tool in [
        ("a tool that swallows its cancellation (timeout=1)", _stubborn()),
        ("a blocking tool (timeout=1)", _blocking()),
    ]:
        model = ScriptedModel([reply("", scripted_call(tool.name)), reply("done")])
        _settles_in_time(c, name, agent("deadline", model, tools=[tool], timeout=1), 1)
    return c


def _stubborn() -> Any:
    import flue_nb as flue

    @flue.tool
    async def stubborn() -> str:
        """Wait, and keep waiting when cancelled."""
        try:
            await asyncio.sleep(STALL)
        except asyncio.CancelledError:
            await asyncio.sleep(STALL)  # swallows the cancellation
        return "late"

    return stubborn


def _blocking() -> Any:
    import flue_nb as flue

    @flue.tool
    def blocking() -> str:
        """Block the thread it runs on."""
        time.sleep(STALL)
        return "late"

    return blocking


# --- hostile OpenAI-compatible servers ------------------------------------------------------------

HTML = b"<!DOCTYPE html><html><head><title>Sign in - Corporate Proxy</title></head><body>Sign in.</body></html>"
COMPLETION = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "local-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
    }
).encode()
NULL_DELTA = (
    b'data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "local-model", '
    b'"choices": [{"index": 0, "delta": {"content": null}, "finish_reason": null}]}\n\n'
)


class _StrictServer(OpenAIServer):
    """llama.cpp's server: an assistant message whose `content` is null gets HTTP 500."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()
        self.nulls = 0

    def next_reply(self) -> Any:
        messages = getattr(self.local, "body", {}).get("messages") or []
        if any(m.get("role") == "assistant" and "content" in m and m["content"] is None for m in messages):
            self.nulls += 1
            return openai_error(500, "Assistant message must contain either 'content' or 'tool_calls'!")
        return super().next_reply()


class _StrictHandler(OpenAIServer.handler):  # type: ignore[name-defined,misc]
    def record(self, method: str) -> dict[str, Any]:
        body: dict[str, Any] = super().record(method)
        self.fake.local.body = body
        return body


_StrictServer.handler = _StrictHandler


class _Sleeps:
    """An instant sleep that counts the backoff it was asked for (a retry's)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def hostile_openai(quick: bool) -> Counts:
    """Issue 32.9 and 32.12's servers, each followed by what the README promises."""
    import flue_nb as flue
    from flue_nb.runtime.core.loop import RunSettings
    from flue_nb.runtime.events import Log
    from flue_nb.runtime.providers.openai import OpenAIModel

    c = Counts("hostile OpenAI-compatible servers", ("lost", "duplicated", "hangs", "tracebacks", "untrue", "retried"))

    @flue.tool
    def noop(n: int = 0) -> str:
        """Answer with the number given."""
        return f"result {n}"

    def run(
        name: str,
        server: OpenAIServer,
        *,
        url: str | None = None,
        check: Callable[[Any, list[Any]], None] | None = None,
    ) -> None:
        c.scenarios += 1
        sleeps = _Sleeps()
        model = OpenAIModel("local-model", base_url=url or server.base_url, api_key="k", context_window=8_192)
        s = flue.init(agent("hostile_openai", model, tools=[noop]), db=":memory:", settings=RunSettings(sleep=sleeps))
        seen: list[Any] = []
        s.observe(seen.append)
        if not attempt(c, name, s, lambda: _quiet_prompt(s), 60):
            return
        [sub] = s.submissions()
        tries = len(server.chat_requests) if url is None else 1 + len(sleeps.delays)
        c.notes.append(
            f"{name}: {sub.outcome.value if sub.outcome else None}, {tries} requests, {sub.attempts} attempts"
        )
        if check is not None:
            check(s, seen)
        else:  # a final error: sent once, never retried
            if tries > 1 or sleeps.delays or sub.attempts > 1:
                c.add("retried", f"{name}: {tries} requests, {len(sleeps.delays)} backoffs, {sub.attempts} attempts")

    for name, body, kind in [
        ("HTML 200 to a streamed request", HTML, "text/html"),
        ("plain JSON 200", COMPLETION, "application/json"),
    ]:
        with OpenAIServer() as server:
            server.enqueue(*[RawReply(body, kind)] * 10)
            run(name, server)

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    with OpenAIServer() as idle:
        run("a loopback server refusing connections", idle, url=f"http://127.0.0.1:{port}/v1")

    def one_result_per_id(s: Any, seen: list[Any]) -> None:
        from flue_nb.runtime.messages import ToolResultMessage

        ids = [m.call_id for m in s.history() if isinstance(m, ToolResultMessage)]
        if len(ids) != len(set(ids)):
            c.add("duplicated", f"two results under one id: {ids}")

    with OpenAIServer() as server:
        server.enqueue(
            chat(tool_call("call_0", "noop", {"n": 1}), tool_call("call_0", "noop", {"n": 2})), chat(chat_text("both"))
        )
        run("two tool calls sharing one id", server, check=one_result_per_id)
        sent = [
            [m["tool_call_id"] for m in r.body["messages"] if m.get("role") == "tool"] for r in server.chat_requests[1:]
        ]
        for ids in sent:
            if len(ids) != len(set(ids)):
                c.add("duplicated", f"two results under one id sent to the server: {ids}")

    with _StrictServer() as strict:
        strict.enqueue(chat(tool_call("call_a", "noop", {"n": 1})), chat(chat_text("done")))
        run("a server that answers content: null with HTTP 500 (llama.cpp)", strict, check=lambda s, seen: None)
        if strict.nulls:
            c.add("retried", f"content: null sent {strict.nulls} times, each answered 500")

    with OpenAIServer() as server:
        server.enqueue(chat(chat_text("fine"), raw_before={1: NULL_DELTA}))
        run("content: null in a streamed delta", server, check=lambda s, seen: None)

    def says_cut(s: Any, seen: list[Any]) -> None:
        if not any(isinstance(e, Log) and e.kind == "answer_cut" for e in seen):
            c.add("untrue", "an answer stopped by finish_reason length, with nothing saying it was cut")

    with OpenAIServer() as server:
        server.enqueue(chat(chat_text("The answer is that the"), finish_reason="length"))
        run("finish_reason: length", server, check=says_cut)

    return c


def _quiet_prompt(s: Any) -> None:
    from flue_nb import FlueError

    try:
        s.prompt("go", timeout=50)
    except FlueError:
        pass
