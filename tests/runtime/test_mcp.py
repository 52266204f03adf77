"""MCP servers (`use_mcp`): mounting, calling, reuse, failures — against real servers from the SDK."""

from __future__ import annotations

import shutil
import sys
import time

import pytest
from agents import make_agent, session
from mcp_client import CALC, SERVER, calc_agent, free_port, http_server, names, results, signals

import flue_nb as flue
from flue_nb.models import FunctionModel, ScriptedModel, reply, tool_call
from flue_nb.runtime.tools.mcp import McpServer, close_mcp_servers, mcp_servers, mount_mcp

LISTED = tuple("add text pid dot fail slow crash grow exit_soon steps iccp remember recall background".split())
"""What the test server lists and flue_nb mounts (`background` requires tasks: called as one)."""


@pytest.fixture(autouse=True)
def _close_servers():
    yield
    close_mcp_servers()


def test_stdio_server_tools_mount_as_mcp_names_with_the_servers_own_schema():
    model = ScriptedModel(["hi"])
    session(calc_agent(model)).prompt("hello")
    request = model.requests[0]
    assert names(request) == [
        "task",
        *(f"mcp__calc__{n}" for n in LISTED),
    ]
    add = next(t for t in request.tools if t.name == "mcp__calc__add")
    assert add.description == "Add two integers."
    assert add.input_schema["required"] == ["a", "b"]
    assert add.input_schema["properties"]["a"]["type"] == "integer"


def test_a_tool_call_reaches_the_server_and_its_text_comes_back_as_a_tool_result():
    model = ScriptedModel([reply("", tool_call("mcp__calc__add", a=2, b=40)), reply("42")])
    assert session(calc_agent(model)).prompt("add") == "42"
    [result] = results(model.requests[1])
    assert (result.content, result.is_error) == ("42", False)


def test_a_tool_error_on_the_server_is_an_error_result_and_bad_input_names_the_field():
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__calc__fail", why="boom"), tool_call("mcp__calc__add", a="x", b=1)),
            reply("ok"),
        ]
    )
    session(calc_agent(model)).prompt("go")
    failed, invalid = results(model.requests[1])
    assert failed.is_error and "fail" in failed.content
    assert invalid.is_error and "`a`" in invalid.content and "integer" in invalid.content


def test_a_prefix_mounts_the_tools_under_it_and_an_empty_one_under_their_own_names():
    model = ScriptedModel([reply("", tool_call("add", a=2, b=40)), reply("42")])
    assert session(calc_agent(model, tools=["pid", "add"], prefix="")).prompt("add") == "42"
    assert names(model.requests[0]) == ["task", "pid", "add"]
    [result] = results(model.requests[1])
    assert (result.name, result.content, result.is_error) == ("add", "42", False)
    other = ScriptedModel(["hi"])
    session(calc_agent(other, tools=["pid"], prefix="calc_")).prompt("hello")
    assert names(other.requests[0]) == ["task", "calc_pid"]
    with pytest.raises(flue.ConfigError, match="`prefix` must be"):
        session(calc_agent(ScriptedModel(["never"]), prefix="a b")).prompt("hello")


def test_a_prefix_that_makes_a_name_collide_fails_the_submission():
    @flue.tool
    def pid() -> str:
        """A tool of the agent's own named like the server's."""
        return "mine"

    model = ScriptedModel(["never"])
    agent = make_agent(model, tools=(pid,), extra=lambda: flue.use_mcp("calc", command=CALC, prefix=""))
    with pytest.raises(flue.ToolNameConflictError, match="'pid'"):
        session(agent).prompt("hello")
    assert model.requests == []


def test_tools_filter_mounts_only_the_named_tools():
    model = ScriptedModel(["hi"])
    session(calc_agent(model, tools=["pid", "add"])).prompt("hello")
    assert names(model.requests[0]) == ["task", "mcp__calc__pid", "mcp__calc__add"]


def test_tools_filter_naming_a_tool_the_server_lacks_fails_with_the_listed_names():
    model = ScriptedModel(["never"])
    with pytest.raises(flue.McpConnectionError, match="no tool `nope`.*`add`"):
        session(calc_agent(model, tools=["nope"])).prompt("hello")
    assert model.requests == []


def test_the_connection_is_opened_once_and_reused_across_submissions_and_sessions():
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__calc__pid")),
            reply("one"),
            reply("", tool_call("mcp__calc__pid")),
            reply("two"),
            reply("", tool_call("mcp__calc__pid")),
            reply("three"),
        ]
    )
    agent = calc_agent(model)
    s = session(agent)
    s.prompt("first")
    s.prompt("second")
    session(agent, conversation="other").prompt("third")
    pids = {results(r)[-1].content for r in model.requests if results(r)}
    assert len(pids) == 1
    assert [(m.name, m.state) for m in mcp_servers()] == [("calc", "connected")]


def test_a_server_that_cannot_start_fails_the_submission_before_the_model_runs(tmp_path):
    model = ScriptedModel(["never"])
    agent = make_agent(model, extra=lambda: flue.use_mcp("gone", command=[str(tmp_path / "no-such-server")]))
    with pytest.raises(flue.McpConnectionError) as info:
        session(agent).prompt("hello")
    assert model.requests == []
    assert info.value.type == "mcp_connection_failed"
    assert "`gone`" in info.value.message and "not found" in info.value.message
    assert "optional=True" in info.value.message


def test_a_server_that_exits_at_start_is_reported_with_its_stderr():
    model = ScriptedModel(["never"])
    agent = make_agent(model, extra=lambda: flue.use_mcp("calc", command=CALC, env={"MCP_TEST_FAIL_AT_START": "1"}))
    with pytest.raises(flue.McpConnectionError, match="refusing to start"):
        session(agent).prompt("hello")
    assert model.requests == []


def test_an_optional_server_that_cannot_start_mounts_nothing_and_the_model_is_told_once(tmp_path):
    model = ScriptedModel(["one", "two"])
    agent = make_agent(model, extra=lambda: flue.use_mcp("gone", command=[str(tmp_path / "missing")], optional=True))
    s = session(agent)
    assert s.prompt("hello") == "one"
    assert names(model.requests[0]) == ["task"]
    [signal] = signals(model.requests[0])
    assert signal.signal_type == "resources"
    assert "MCP server `gone` is unavailable" in signal.text and "not found" in signal.text
    assert len(signal.changes) == 1 and signal.changes[0].startswith("MCP server `gone` is unavailable")
    s.prompt("again")
    assert len(signals(model.requests[1])) == 1  # still down: not announced a second time


def test_a_server_crashing_mid_call_is_an_error_result_and_the_next_call_restarts_it():
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__calc__pid")),
            reply("", tool_call("mcp__calc__crash")),
            reply("", tool_call("mcp__calc__pid")),
            reply("done"),
        ]
    )
    assert session(calc_agent(model)).prompt("go") == "done"
    first, crashed, second = results(model.requests[3])
    assert crashed.is_error
    assert "went away during this call" in crashed.content and "crashing on purpose" in crashed.content
    assert not second.is_error and second.content != first.content  # a new server process
    assert signals(model.requests[3]) == []  # same tools after the restart: nothing to announce


def test_an_abort_during_a_call_settles_aborted_and_the_connection_stays_usable():
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__calc__pid")),
            reply("", tool_call("mcp__calc__slow", seconds=30)),
            reply("", tool_call("mcp__calc__pid")),
            reply("same server"),
        ]
    )
    s = session(calc_agent(model))
    receipt = s.dispatch("sleep")
    deadline = time.monotonic() + 30
    while len(model.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the slow call is in flight
    started = time.monotonic()
    s.abort()
    with pytest.raises(flue.SubmissionAbortedError):
        s.read(receipt, timeout=20)
    assert time.monotonic() - started < 10
    assert s.prompt("again") == "same server"
    pids = [r.content for r in results(model.requests[3]) if r.name == "mcp__calc__pid"]
    assert len(pids) == 2 and pids[0] == pids[1]


def test_a_server_that_crashes_and_cannot_restart_is_unmounted_and_the_model_told(tmp_path):
    script = tmp_path / "calc_copy.py"
    shutil.copy(SERVER, script)
    seen = []

    def model_fn(request):
        seen.append(request)
        if len(seen) == 1:
            script.unlink()  # the running server keeps going; a restart will fail
            return reply("", tool_call("mcp__calc__crash"))
        return reply("it is gone")

    model = FunctionModel(model_fn)
    agent = make_agent(model, extra=lambda: flue.use_mcp("calc", command=[sys.executable, str(script)]))
    assert session(agent).prompt("go") == "it is gone"
    [crashed] = results(seen[1])
    assert crashed.is_error and "went away during this call" in crashed.content
    assert not any(n.startswith("mcp__calc__") for n in names(seen[1]))
    texts = [s.text for s in signals(seen[1])]
    assert any("MCP server `calc` is unavailable" in t for t in texts)
    assert any("Unmounted tools" in t and "mcp__calc__crash" in t for t in texts)


def test_a_tool_list_change_on_the_server_reaches_the_model_as_a_resources_signal():
    model = ScriptedModel(
        [reply("", tool_call("mcp__calc__grow")), reply("", tool_call("mcp__calc__extra")), reply("ok")]
    )
    session(calc_agent(model)).prompt("grow")
    assert "mcp__calc__extra" in names(model.requests[1])
    [signal] = signals(model.requests[1])
    assert signal.signal_type == "resources" and "Mounted tools: `mcp__calc__extra`" in signal.text
    assert results(model.requests[2])[-1].content == "extra!"


def test_mounting_a_server_mid_conversation_is_a_resources_signal_not_a_prompt_rewrite():
    model = ScriptedModel(["before", "after"])
    flags = {"mcp": False}

    def maybe_mcp():
        if flags["mcp"]:
            flue.use_mcp("calc", command=CALC, tools=["add"])

    s = session(make_agent(model, extra=maybe_mcp))
    s.prompt("one")
    flags["mcp"] = True
    s.prompt("two")
    assert model.requests[1].system == model.requests[0].system
    [signal] = signals(model.requests[1])
    assert signal.signal_type == "resources" and "Mounted tools: `mcp__calc__add`" in signal.text


def test_streamable_http_server_on_loopback_and_its_death_mid_conversation():
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with http_server(port) as proc:
        seen = []

        def model_fn(request):
            seen.append(request)
            if len(seen) == 1:
                return reply("", tool_call("mcp__web__add", a=1, b=2))
            if len(seen) == 2:
                assert [(m.name, m.target, m.state) for m in mcp_servers()] == [("web", url, "connected")]
                proc.kill()
                proc.wait(10)
                return reply("", tool_call("mcp__web__add", a=3, b=4))
            return reply("the server is gone")

        agent = make_agent(FunctionModel(model_fn), extra=lambda: flue.use_mcp("web", url=url, tools=["add"]))
        assert session(agent).prompt("add") == "the server is gone"
        assert results(seen[1])[0].content == "3"
        gone = results(seen[2])[-1]
        assert gone.is_error and "went away during this call" in gone.content
        assert "mcp__web__add" not in names(seen[2])
        assert any("MCP server `web` is unavailable" in sig.text for sig in signals(seen[2]))


def test_an_image_result_comes_back_as_an_image_block_next_to_a_line_of_text():
    from flue_nb.runtime.coordinator import coordinator
    from flue_nb.runtime.tools.tool import ToolContext, execute_tool

    async def call():
        [dot], _ = await mount_mcp([McpServer("calc", command=tuple(CALC), tools=("dot",))], first=True)
        return await execute_tool(dot, {}, ToolContext("c1"))

    out = coordinator().submit(call()).result(60)
    assert not out.is_error
    assert out.content.startswith("[image 1: image/png")
    [image] = out.images
    assert (image.media_type, image.width, image.height) == ("image/png", 1, 1)
    assert (image.data or b"").startswith(b"\x89PNG") and image.label == "calc image 1"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of"),
        ({"command": CALC, "url": "http://127.0.0.1:1/mcp"}, "exactly one of"),
        ({"command": "python server.py"}, "list of strings"),
        ({"url": "ftp://x"}, "http://"),
        ({"command": CALC, "tools": "add"}, "list of tool names"),
    ],
)
def test_use_mcp_misuse_fails_before_any_server_starts(kwargs, message):
    model = ScriptedModel(["never"])
    with pytest.raises(flue.ConfigError, match=message):
        session(make_agent(model, extra=lambda: flue.use_mcp("calc", **kwargs))).prompt("hello")
    assert mcp_servers() == []


def test_use_mcp_outside_a_render_and_a_bad_name_are_refused():
    with pytest.raises(flue.HookError, match="outside an agent render"):
        flue.use_mcp("calc", command=CALC)
    model = ScriptedModel(["never"])
    with pytest.raises(flue.ConfigError, match="letters, digits"):
        session(make_agent(model, extra=lambda: flue.use_mcp("my calc", command=CALC))).prompt("hello")
