"""Every tool result is bounded (issue 20.1): custom tools and MCP tools get the contract's limit
(2000 lines / 50 KB, contract 2.2) with a marker saying what was cut; in the kernel the whole
text stays reachable as `_flue.results[N]`; a result stored before the limit is cut on load."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import FunctionModel, ScriptedModel, fail, reply, tool_call
from flue_nb.notebook.kernel.sandbox import KernelSandbox
from flue_nb.runtime.messages import ToolResultMessage
from flue_nb.runtime.tools.mcp import close_mcp_servers
from flue_nb.runtime.tools.truncate import MAX_BYTES

LEAKY = [sys.executable, str(Path(__file__).with_name("mcp_leaky_server.py"))]
FIVE_MB_LINES = 80_000  # 80,000 lines of 64 bytes: about 5 MB


def big_text(lines: int = FIVE_MB_LINES) -> str:
    return "\n".join(f"{i:08d} " + "y" * 55 for i in range(lines))


@flue.tool
def dump(lines: int) -> str:
    """A very large result."""
    return big_text(lines)


@flue.tool
def one_line() -> str:
    """A single 5 MB line."""
    return "z" * 5_000_000


def results(request) -> list[ToolResultMessage]:
    return [m for m in request.messages if isinstance(m, ToolResultMessage)]


def size(text: str) -> int:
    return len(text.encode())


def test_a_custom_tool_result_is_cut_to_the_limit_with_a_marker_before_the_store(tmp_path: Path) -> None:
    model = ScriptedModel([reply("", tool_call("dump", lines=FIVE_MB_LINES)), reply("seen"), reply("again")])
    db = tmp_path / "s.sqlite"
    s = session(make_agent(model, tools=(dump,)), db=str(db))
    assert s.prompt("dump it") == "seen"
    [result] = results(model.requests[1])
    assert result.content.startswith("00000000 yyy")
    assert "[Result cut to the 2000-line / 50 KB limit" in result.content
    assert "showing lines 1-787 of 80,000" in result.content  # 65 bytes a line: 50 KB first
    assert "The rest is not kept" in result.content
    assert size(result.content) < MAX_BYTES + 400
    # The next message's request carries the cut result, not 5 MB.
    assert s.prompt("and now?") == "again"
    assert sum(size(m.content) for m in results(model.requests[2])) < MAX_BYTES + 400
    stored = sum(f.stat().st_size for f in tmp_path.glob("s.sqlite*"))
    assert stored < 1_000_000, stored


def test_a_single_giant_line_is_cut_to_its_first_50_kb() -> None:
    model = ScriptedModel([reply("", tool_call("one_line")), reply("ok")])
    session(make_agent(model, tools=(one_line,))).prompt("go")
    [result] = results(model.requests[1])
    head, marker = result.content.split("\n\n[Result cut", 1)
    assert head == "z" * MAX_BYTES
    assert "the first 51,200 bytes of line 1 of 1" in marker


def test_in_the_kernel_sandbox_the_whole_result_is_kept_as_a_handle(tmp_path: Path) -> None:
    ns: dict = {}
    model = ScriptedModel([reply("", tool_call("dump", lines=5000)), reply("ok")])
    sandbox = KernelSandbox(tmp_path, namespace=ns)
    session(make_agent(model, sandbox=sandbox, tools=(dump,))).prompt("go")
    [result] = results(model.requests[1])
    assert "kept as `_flue.results[1]` (str)" in result.content
    assert ns["_flue"].results[1] == big_text(5000)


def test_results_within_the_limit_are_left_alone() -> None:
    model = ScriptedModel([reply("", tool_call("dump", lines=780)), reply("ok")])
    session(make_agent(model, tools=(dump,))).prompt("go")
    [result] = results(model.requests[1])
    assert result.content == big_text(780)  # 50,699 bytes: within 50 KB


@pytest.fixture
def _close_servers():
    yield
    close_mcp_servers()


def test_an_mcp_tool_result_is_bounded_before_it_is_stored(tmp_path: Path, _close_servers) -> None:
    model = ScriptedModel([reply("", tool_call("mcp__leaky__big", lines=100_000)), reply("ok")])
    agent = make_agent(model, extra=lambda: flue.use_mcp("leaky", command=LEAKY))
    db = tmp_path / "m.sqlite"
    session(agent, db=str(db)).prompt("go")
    [result] = results(model.requests[1])
    assert "showing lines 1-" in result.content and "of 100,000" in result.content
    assert size(result.content) < MAX_BYTES + 400
    assert sum(f.stat().st_size for f in tmp_path.glob("m.sqlite*")) < 1_000_000


def test_a_result_stored_whole_before_the_limit_is_cut_when_the_conversation_is_loaded(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    first = ScriptedModel([reply("", tool_call("dump", lines=10)), reply("seen")])
    session(make_agent(first, tools=(dump,)), db=str(db), conversation="old").prompt("go")
    # Make the stored result what an earlier version kept: the whole 5 MB.
    with sqlite3.connect(db) as con:
        seq, data = con.execute("SELECT seq, data FROM records WHERE data LIKE '%\"tool_result\"%'").fetchone()
        record = json.loads(data)
        record["content"] = big_text()
        con.execute("UPDATE records SET data = ? WHERE seq = ?", (json.dumps(record), seq))
    later = ScriptedModel(["continued"])
    s = session(make_agent(later, tools=(dump,)), db=str(db), conversation="old")
    assert s.prompt("go on") == "continued"
    [result] = results(later.requests[0])
    assert "[Result cut to the 2000-line / 50 KB limit" in result.content
    assert size(result.content) < MAX_BYTES + 400


@flue.tool
def chunk(i: int) -> str:
    """40 KB of text: within the limit alone, too much for the model as a batch of three."""
    return f"chunk {i}\n" + ("z" * 99 + "\n") * 400


def test_a_batch_of_results_that_overflows_is_folded_and_the_conversation_continues() -> None:
    def model_fn(request):
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        if sum(len(m.content) for m in results) > 60_000:
            return fail("context_overflow", "prompt is too long: 250000 tokens > 200000 maximum")
        if not results:
            return reply("", tool_call("chunk", i=1), tool_call("chunk", i=2), tool_call("chunk", i=3))
        return reply(f"read {len(results)} chunks")

    model = FunctionModel(model_fn)
    s = session(make_agent(model, tools=(chunk,)))
    assert s.prompt("read them") == "read 3 chunks"
    folded = results(model.requests[-1])
    assert all("folded when the context overflowed" in m.content for m in folded)
    assert s.prompt("and again?") == "read 3 chunks"  # a later message does not fail either
