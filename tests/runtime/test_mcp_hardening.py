"""MCP as robust as the built-in tools (issue 20.3): restarts, new sessions, timeouts, name
collisions, task-only tools, progress, odd PNGs, one stdio server's calls in order, stdout noise."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agents import make_agent, session
from mcp_client import CALC, calc_agent, free_port, http_server, names, results, signals

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime import events as ev
from flue_nb.runtime.tools.mcp import close_mcp_servers, mcp_servers


@pytest.fixture(autouse=True)
def _close_servers():
    yield
    close_mcp_servers()


def _wait_until_noticed(name: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(m.state != "connected" for m in mcp_servers() if m.name == name):
            return
        time.sleep(0.05)


def test_a_stdio_server_that_died_between_prompts_is_restarted_before_the_next_call():
    model = ScriptedModel(
        [reply("", tool_call("mcp__calc__pid")), reply("one"), reply("", tool_call("mcp__calc__pid")), reply("two")]
    )
    s = session(calc_agent(model))
    s.prompt("first")
    first = results(model.requests[1])[-1].content
    os.kill(int(first), signal.SIGKILL)
    _wait_until_noticed("calc")
    assert s.prompt("second") == "two"
    second = results(model.requests[3])[-1]
    assert not second.is_error, second.content
    assert second.content != first  # a new server process answered


@pytest.mark.parametrize("flags", [(), ("--session-400",)], ids=["404", "400-no-valid-session"])
def test_an_http_server_that_restarted_gets_a_new_session_instead_of_failing_every_call(flags):
    port = free_port()
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__web__pid")),
            reply("one"),
            reply("", tool_call("mcp__web__pid"), tool_call("mcp__web__add", a=1, b=2)),
            reply("two"),
        ]
    )
    agent = make_agent(model, extra=lambda: flue.use_mcp("web", url=f"http://127.0.0.1:{port}/mcp"))
    s = session(agent)
    with http_server(port, *flags):
        s.prompt("first")
    first = results(model.requests[1])[-1]
    assert not first.is_error, first.content
    with http_server(port, *flags):  # the same URL, a new process that knows no session
        assert s.prompt("second") == "two"
    pid, added = results(model.requests[3])[-2:]
    assert not pid.is_error and not added.is_error, (pid.content, added.content)
    assert pid.content != first.content and added.content == "3"


def test_a_call_past_its_call_timeout_is_an_error_result_and_the_server_stays_usable():
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__calc__pid")),
            reply("", tool_call("mcp__calc__slow", seconds=60)),
            reply("", tool_call("mcp__calc__pid")),
            reply("done"),
        ]
    )
    started = time.monotonic()
    assert session(calc_agent(model, call_timeout=1)).prompt("go") == "done"
    assert time.monotonic() - started < 30  # not the 60 s the call would take
    before, slow, after = results(model.requests[3])
    assert slow.is_error and "call_timeout" in slow.content and "1 s" in slow.content
    assert (after.is_error, after.content) == (False, before.content)  # the same server process


def test_call_timeout_must_be_a_positive_number():
    model = ScriptedModel(["never"])
    with pytest.raises(flue.ConfigError, match="call_timeout"):
        session(calc_agent(model, call_timeout=0)).prompt("hello")


def test_the_start_timeout_is_honoured_and_a_timed_out_server_is_not_waited_for_again_at_once():
    from flue_nb.runtime.tools._mcp_sdk import import_sdk

    import_sdk()  # once per process, off the loop, before any server's clock starts
    model = ScriptedModel(["never"])
    agent = make_agent(
        model, extra=lambda: flue.use_mcp("calc", command=CALC, env={"MCP_TEST_HANG_AT_START": "1"}, timeout=1)
    )
    s = session(agent)
    seen: list[ev.Event] = []
    s.observe(seen.append)
    with pytest.raises(flue.McpConnectionError, match="within 1 s"):
        s.prompt("hello")
    [running] = [e for e in seen if isinstance(e, ev.SubmissionRunning)]
    [settled] = [e for e in seen if isinstance(e, ev.SubmissionSettled)]
    first = settled.timestamp - running.timestamp
    assert first < 10, f"a 1 s start timeout took {first:.1f} s (the default is 30 s)"
    with pytest.raises(flue.McpConnectionError) as info:
        s.prompt("again")
    assert "not tried again" in info.value.message and "close_mcp_servers" in info.value.message
    assert model.requests == []


def test_a_script_that_exits_right_after_a_start_timeout_leaves_no_server_running(tmp_path):
    pidfile = tmp_path / "pid"
    script = f"""
import sys
sys.path[:0] = {[str(Path(__file__).parent)]!r}
from agents import make_agent, session
import flue_nb as flue
from flue_nb.models import ScriptedModel
env = {{"MCP_TEST_HANG_AT_START": "1", "MCP_TEST_PIDFILE": {str(pidfile)!r}}}
agent = make_agent(ScriptedModel(["never"]), extra=lambda: flue.use_mcp("calc", command={CALC!r}, env=env, timeout=1))
try:
    session(agent).prompt("hello")
except flue.McpConnectionError:
    print("timed out")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "timed out" in out.stdout, out.stderr
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"the hung server {pid} outlived the script")


def test_tool_names_that_collide_once_sanitised_fail_that_server_alone_naming_both():
    model = ScriptedModel(["never"])
    clash = make_agent(
        model, extra=lambda: flue.use_mcp("clash", command=CALC, env={"MCP_TEST_COLLIDE": "1"}, tools=None)
    )
    with pytest.raises(flue.McpConnectionError) as info:
        session(clash).prompt("hello")
    assert "`a.b`" in info.value.message and "`a_b`" in info.value.message
    assert "mcp__clash__a_b" in info.value.message

    model = ScriptedModel(["fine"])

    def both() -> None:
        flue.use_mcp("calc", command=CALC, tools=["add"])
        flue.use_mcp("clash", command=CALC, env={"MCP_TEST_COLLIDE": "1"}, optional=True)

    assert session(make_agent(model, extra=both)).prompt("hello") == "fine"
    assert names(model.requests[0]) == ["task", "mcp__calc__add"]
    [sig] = signals(model.requests[0])
    assert "MCP server `clash` is unavailable" in sig.text and "`a.b`" in sig.text


def test_a_tool_that_requires_task_augmented_execution_is_mounted_and_called_as_a_task():
    # The test server lists `background` as requiring a task but answers the task-augmented call
    # at once (the SDK's server has no task flow): its plain result is taken as is. The task flow
    # itself runs against server-everything (test_mcp_real_everything.py).
    model = ScriptedModel([reply("", tool_call("mcp__calc__background")), reply("done")])
    assert session(calc_agent(model, tools=["background"])).prompt("hello") == "done"
    assert names(model.requests[0]) == ["task", "mcp__calc__background"]
    [result] = results(model.requests[1])
    assert (result.content, result.is_error) == ("ran without a task", False)


def test_progress_notifications_reach_observers_as_tool_update_events():
    model = ScriptedModel([reply("", tool_call("mcp__calc__steps", n=3)), reply("done")])
    s = session(calc_agent(model))
    seen: list[ev.Event] = []
    s.observe(seen.append)
    assert s.prompt("go") == "done"
    [start] = [e for e in seen if isinstance(e, ev.ToolStart)]
    updates = [e for e in seen if isinstance(e, ev.ToolUpdate)]
    assert [(u.progress, u.total, u.message) for u in updates] == [
        (1.0, 3.0, "step 1 of 3"),
        (2.0, 3.0, "step 2 of 3"),
        (3.0, 3.0, "step 3 of 3"),
    ]
    assert {(u.call_id, u.name) for u in updates} == {(start.call_id, "mcp__calc__steps")}
    [end] = [e for e in seen if isinstance(e, ev.ToolEnd)]
    assert seen.index(updates[-1]) < seen.index(end)


def test_a_png_pillow_refuses_for_a_bad_ancillary_chunk_still_reaches_the_model_as_a_png():
    model = ScriptedModel([reply("", tool_call("mcp__calc__iccp")), reply("seen")])
    session(calc_agent(model)).prompt("look")
    [result] = results(model.requests[1])
    assert not result.is_error and result.content.startswith("[image 1: image/png")
    [image] = result.images
    assert (image.media_type, image.width, image.height) == ("image/png", 1, 1)
    assert (image.data or b"").startswith(b"\x89PNG")


def test_writes_to_one_stdio_server_in_one_batch_run_one_after_another(tmp_path):
    state = tmp_path / "notes.json"
    writes = [tool_call("mcp__calc__remember", note=f"n{i}") for i in range(16)]
    model = ScriptedModel([reply("", *writes), reply("", tool_call("mcp__calc__recall")), reply("kept")])
    session(calc_agent(model, env={"MCP_TEST_STATE": str(state)})).prompt("note")
    assert [r.content for r in results(model.requests[1])] == [f"{i} notes" for i in range(1, 17)]
    assert json.loads(results(model.requests[2])[-1].content) == [f"n{i}" for i in range(16)]


def test_a_read_made_after_a_write_in_one_batch_sees_the_write(tmp_path):
    # Read-only calls overlap one another, never a write made before them (the reference memory
    # server's read_graph after create_entities in one batch read the graph before it).
    state = tmp_path / "notes.json"
    batch = [tool_call("mcp__calc__remember", note="a"), tool_call("mcp__calc__recall"), tool_call("mcp__calc__recall")]
    model = ScriptedModel([reply("", *batch), reply("kept")])
    session(calc_agent(model, env={"MCP_TEST_STATE": str(state)})).prompt("note")
    assert [r.content for r in results(model.requests[1])] == ["1 notes", '["a"]', '["a"]']


def test_read_only_tools_of_a_stdio_server_may_run_beside_each_other(tmp_path):
    from flue_nb.runtime.tools.mcp import McpTool

    model = ScriptedModel(["hi"])
    agent = calc_agent(model, tools=["recall", "remember"])
    s = session(agent)
    s.prompt("hello")
    from flue_nb.runtime.tools import mcp as mcp_module

    built = {t.remote_name: t for _, tools in mcp_module._tools.values() for t in tools if isinstance(t, McpTool)}
    assert (built["recall"].concurrent, built["remember"].concurrent) == (True, False)


def test_a_chatty_server_costs_one_log_line_not_a_traceback_per_stdout_line(caplog):
    caplog.set_level(logging.DEBUG)
    model = ScriptedModel([reply("", tool_call("mcp__calc__add", a=1, b=1)), reply("2")])
    assert session(calc_agent(model, env={"MCP_TEST_CHATTY": "200"})).prompt("add") == "2"
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert tracebacks == []
    lines = [r for r in caplog.records if "not JSON-RPC" in r.getMessage()]
    assert len(lines) == 1 and "`calc`" in lines[0].getMessage()
    assert "line 0 of chatter" in lines[0].getMessage()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="reads Linux's /proc")
def test_a_stdio_server_that_ended_is_seen_dead_before_its_stdout_says_so():
    """A server killed between prompts is restarted before the next call even when the reader
    has not yet read its EOF (a loaded machine): the call must not be sent into a dead pipe."""
    from flue_nb.runtime.tools._mcp_connection import Connection
    from flue_nb.runtime.tools._mcp_stdio import exited
    from flue_nb.runtime.tools.mcp import McpServer

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not exited(proc.pid)
        conn = Connection(McpServer(name="s", command=(sys.executable,)))
        conn._started(proc.pid)
        assert conn._gone() is None
        proc.kill()
        deadline = time.monotonic() + 10
        while not exited(proc.pid) and time.monotonic() < deadline:  # a zombie until reaped
            time.sleep(0.01)
        assert conn._gone() == "the server exited since its last call"
    finally:
        proc.kill()
        proc.wait()
    assert exited(proc.pid)  # reaped: gone from /proc
