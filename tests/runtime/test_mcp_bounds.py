"""The two MCP limits that used to leak: an HTTP server's answer is bounded per message as a stdio
server's is, and a stdio server stuck in a call that timed out is pinged, then restarted."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agents import make_agent, session
from mcp_client import free_port, http_server, results, serving

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime.tools import _mcp_connection, _mcp_stdio
from flue_nb.runtime.tools._mcp_http import _Bounded
from flue_nb.runtime.tools.mcp import close_mcp_servers

RAW = [sys.executable, str(Path(__file__).resolve().parents[2] / "bench" / "_mcp_raw_server.py")]


@pytest.fixture(autouse=True)
def _close_servers():
    yield
    close_mcp_servers()


@pytest.fixture(scope="module")
def raw_http() -> Iterator[str]:
    """The raw server's HTTP endpoint (append `?form=sse` or `?form=nolength`)."""
    port = free_port()
    with serving([*RAW, "--http", str(port)], port, "the raw HTTP server"):
        yield f"http://127.0.0.1:{port}/mcp"


def _big_then_echo(url: str, megabytes: float) -> tuple[ScriptedModel, float]:
    """Call `big` then `echo` on `url`; the model and the seconds the prompt took."""
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__raw__big", megabytes=megabytes)),
            reply("", tool_call("mcp__raw__echo", text="after")),
            reply("done"),
        ]
    )
    agent = make_agent(model, extra=lambda: flue.use_mcp("raw", url=url, call_timeout=60))
    started = time.monotonic()
    assert session(agent).prompt("go") == "done"
    return model, time.monotonic() - started


# --- 1. an HTTP answer over the limit ------------------------------------------------------------


@pytest.mark.parametrize(
    ("form", "seen"),
    [
        ("json", "its Content-Length says 50.6 MB, so none of it was read"),
        ("nolength", "flue_nb stopped reading it at 33."),
        ("sse", "flue_nb stopped reading it at 33."),
    ],
)
def test_an_http_answer_over_32_mib_is_an_error_result_naming_its_size_and_the_next_call_works(raw_http, form, seen):
    model, took = _big_then_echo(f"{raw_http}?form={form}", 50)
    [big] = results(model.requests[1])
    assert big.is_error and "over the 32 MiB flue_nb reads from one message" in big.content
    assert seen in big.content and "Ask the tool for less" in big.content
    assert results(model.requests[2])[-1].content == "after"  # the same session goes on
    assert took < 60  # not the call_timeout: the error reached the call at once


@pytest.mark.parametrize("form", ["json", "sse"])
def test_an_http_answer_of_a_few_mb_is_read(raw_http, form):
    # The SDK's own SSE reader refuses any event over 1 MiB, which failed this call as "went away".
    model, _ = _big_then_echo(f"{raw_http}?form={form}", 3)
    [big] = results(model.requests[1])
    assert not big.is_error and "cut to the 2000-line / 50 KB limit" in big.content


def test_the_limit_holds_per_sse_event_not_per_stream(raw_http, monkeypatch):
    monkeypatch.setattr(_mcp_stdio, "MAX_MESSAGE", 1_000_000)
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__raw__chatter", megabytes=0.6, events=3)),  # 1.8 MB in one stream
            reply("", tool_call("mcp__raw__big", megabytes=1.5)),
            reply("done"),
        ]
    )
    agent = make_agent(model, extra=lambda: flue.use_mcp("raw", url=f"{raw_http}?form=sse", call_timeout=60))
    assert session(agent).prompt("go") == "done"
    [chatter] = results(model.requests[1])
    assert (chatter.is_error, chatter.content) == (False, "chattered")
    big = results(model.requests[2])[-1]
    assert big.is_error and "0.953674 MiB" in big.content and "stopped reading it at 1." in big.content


@pytest.mark.parametrize("flags", [(), ("--json",)], ids=["sse", "json"])
def test_an_sdk_server_answers_3_mb_and_after_an_answer_over_the_limit_its_session_goes_on(flags, monkeypatch):
    port = free_port()
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__web__text", megabytes=1.5)),  # 3.1 MB: the text twice (structuredContent)
            reply("", tool_call("mcp__web__text", megabytes=5)),
            reply("", tool_call("mcp__web__add", a=2, b=3)),
            reply("done"),
        ]
    )

    monkeypatch.setattr(_mcp_stdio, "MAX_MESSAGE", 4_000_000)  # over the SDK's 1 MiB, under 5 MB
    agent = make_agent(model, extra=lambda: flue.use_mcp("web", url=f"http://127.0.0.1:{port}/mcp", call_timeout=60))
    with http_server(port, *flags):
        assert session(agent).prompt("go") == "done"
    read, five, added = results(model.requests[3])
    assert not read.is_error and "cut to the 2000-line / 50 KB limit" in read.content
    assert five.is_error and "over the 3.8147 MiB flue_nb reads from one message" in five.content
    assert (added.is_error, added.content) == (False, "5")


async def _through(chunks: list[bytes], events: bool, limit: int, monkeypatch) -> list[bytes]:
    monkeypatch.setattr(_mcp_stdio, "MAX_MESSAGE", limit)

    class Inner:
        async def __aiter__(self):
            for c in chunks:
                yield c

        async def aclose(self) -> None:
            pass

    return [c async for c in _Bounded(Inner(), events, None, lambda why: why)]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_sse_events_are_counted_from_the_blank_line_that_ends_the_last_one(monkeypatch, ending):
    import anyio

    event = b"data: " + b"x" * 80 + ending + ending  # 86-88 bytes each
    chunks = [event[:50], event[50:] + event[:3], event[3:] + event]  # boundaries inside chunks
    assert len(anyio.run(_through, chunks, True, 100, monkeypatch)) == 3
    with pytest.raises(Exception, match="stopped reading it at"):
        anyio.run(_through, [event[:-2] + b"x" * 30], True, 100, monkeypatch)
    with pytest.raises(Exception, match="stopped reading it at 0.0 MB"):
        anyio.run(_through, chunks, False, 100, monkeypatch)  # a JSON body counts whole


# --- 2. a stdio server stuck in a call -------------------------------------------------------------


def _hang_then_pid(tmp_path: Path, *flags: str) -> tuple[ScriptedModel, list[dict]]:
    """pid, a call that hangs past its 1 s call_timeout, pid again; the model and what the server got."""
    log = tmp_path / "received.jsonl"
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__raw__pid")),
            reply("", tool_call("mcp__raw__hostile", how="hang")),
            reply("", tool_call("mcp__raw__pid")),
            reply("done"),
        ]
    )
    agent = make_agent(
        model,
        extra=lambda: flue.use_mcp("raw", command=[*RAW, *flags], env={"MCP_RAW_LOG": str(log)}, call_timeout=1),
    )
    assert session(agent).prompt("go") == "done"
    received = [json.loads(line) for line in log.read_text().splitlines()]
    return model, received


def test_a_single_threaded_server_stuck_in_a_timed_out_call_is_restarted_and_the_model_told(tmp_path, monkeypatch):
    monkeypatch.setattr(_mcp_connection, "PING_TIMEOUT", 1.0)
    model, received = _hang_then_pid(tmp_path)
    first, hung, second = results(model.requests[3])
    assert hung.is_error and "call_timeout" in hung.content
    assert not second.is_error and second.content.startswith("[MCP server `raw` was restarted before this call:")
    assert "did not answer a ping within 1 s" in second.content and "What it held in memory is gone" in second.content
    assert second.content.splitlines()[-1] != first.content  # a new process answered
    assert [m["method"] for m in received].count("initialize") == 2


def test_a_server_that_answers_the_ping_while_busy_is_kept_and_was_sent_the_cancel(tmp_path):
    model, received = _hang_then_pid(tmp_path, "--threaded")
    first, hung, second = results(model.requests[3])
    assert hung.is_error and "call_timeout" in hung.content
    assert (second.is_error, second.content) == (False, first.content)  # the same process, no note
    [call] = [m for m in received if m.get("params", {}).get("arguments", {}).get("how") == "hang"]
    cancels = [m for m in received if m.get("method") == "notifications/cancelled"]
    assert [c["params"]["requestId"] for c in cancels] == [call["id"]]
    assert [m["method"] for m in received].count("ping") == 1
    assert [m["method"] for m in received].count("initialize") == 1
