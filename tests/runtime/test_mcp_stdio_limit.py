"""A stdio MCP server's messages are read in linear time and bounded (issue 20.9): one answer over
`_mcp_stdio.MAX_MESSAGE` is dropped unread and its call gets an error result saying why."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from agents import make_agent, session
from mcp_client import results

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime.tools import _mcp_stdio
from flue_nb.runtime.tools._mcp_stdio import LineReader, oversized_id
from flue_nb.runtime.tools.mcp import close_mcp_servers

RAW = [sys.executable, str(Path(__file__).resolve().parents[2] / "bench" / "_mcp_raw_server.py")]


@pytest.fixture(autouse=True)
def _close_servers():
    yield
    close_mcp_servers()


def test_lines_are_split_across_chunks_and_joined_once():
    reader = LineReader(limit=100)
    assert reader.feed(b'{"a"') == []
    assert reader.feed(b":1}\n\n{") == [b'{"a":1}', b""]
    assert reader.feed(b"}\n") == [b"{}"]


def test_a_line_over_the_limit_is_summarised_by_its_edges_and_size():
    reader = LineReader(limit=1000)
    head = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"'
    out = reader.feed(head + b"x" * 5000) + reader.feed(b"x" * 5000 + b'"}]}}\nnext\n')
    (edges, next_line) = out
    assert isinstance(edges, tuple) and edges[2] == len(head) + 10_000 + 5
    assert next_line == b"next"
    assert oversized_id(edges[0], edges[1]) == 7


def test_the_id_of_an_oversized_answer_is_found_at_its_end_too():
    # The TypeScript SDK writes {"result": ..., "jsonrpc": "2.0", "id": N}
    assert oversized_id(b'{"result":{"content":[', b'"isError":false},"jsonrpc":"2.0","id":"r-3"}') == "r-3"
    assert oversized_id(b'{"result":', b"no id here}") is None


def test_an_answer_over_the_limit_is_an_error_result_and_the_server_answers_the_next_call(monkeypatch):
    monkeypatch.setattr(_mcp_stdio, "MAX_MESSAGE", 1_000_000)
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__raw__big", megabytes=3)),
            reply("", tool_call("mcp__raw__big", megabytes=0.5), tool_call("mcp__raw__echo", text="after")),
            reply("done"),
        ]
    )
    s = session(make_agent(model, extra=lambda: flue.use_mcp("raw", command=RAW)))
    assert s.prompt("go") == "done"
    [big] = results(model.requests[1])
    assert big.is_error and "3.0 MB" in big.content and "0.953674 MiB" in big.content
    assert "Ask the tool for less" in big.content
    small, echo = results(model.requests[2])[-2:]
    assert not small.is_error and "cut to the 2000-line / 50 KB limit" in small.content
    assert echo.content == "after"


def test_an_answer_that_cannot_be_parsed_is_an_error_result_at_once_not_a_call_timeout():
    # 2,000 levels of nesting: pydantic's JSON parser refuses it; the call must not wait 300 s.
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__raw__hostile", how="deep")),
            reply("", tool_call("mcp__raw__echo", text="after")),
            reply("done"),
        ]
    )
    s = session(make_agent(model, extra=lambda: flue.use_mcp("raw", command=RAW, call_timeout=60)))
    started = time.monotonic()
    assert s.prompt("go") == "done"
    assert time.monotonic() - started < 30
    [deep] = results(model.requests[1])
    assert deep.is_error and "could not be read" in deep.content and "recursion" in deep.content
    assert results(model.requests[2])[-1].content == "after"
