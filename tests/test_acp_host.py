"""flue_nb hosting another ACP agent (`flue_nb.acp.host`), from plain Python: a scripted agent
(tests/acp_scripted_agent.py, the ACP package's agent side) run as a subprocess; its text and
thinking stream as a flue_nb run, its tool calls are stand-in calls with their results, its
permission requests are decided by flue_nb's approval, Stop cancels its turn, and the store keeps
the conversation."""

from __future__ import annotations

import json
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("acp")

import flue_nb as flue  # noqa: E402
from flue_nb.acp import host  # noqa: E402
from flue_nb.acp.hosting import hosted_of  # noqa: E402
from flue_nb.runtime.events import TextDelta, ThinkingDelta, ToolEnd, ToolStart  # noqa: E402

SCRIPTED = str(Path(__file__).with_name("acp_scripted_agent.py"))


def _agent(tmp_path: Path, **kw: Any) -> Any:
    return host(
        [sys.executable, SCRIPTED], cwd=str(tmp_path), env={"SCRIPTED_ACP_LOG": str(tmp_path / "agent.log")}, **kw
    )


def _log(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "agent.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _session(agent: Any, tmp_path: Path) -> Any:
    return flue.init(agent, conversation="hosted", db=str(tmp_path / "flue.sqlite"), cwd=str(tmp_path))


def test_its_text_and_thinking_stream_as_a_flue_run_and_are_stored(tmp_path):
    session = _session(_agent(tmp_path), tmp_path)
    events = list(session.stream("hello"))
    assert "".join(e.delta for e in events if isinstance(e, TextDelta)) == "Hello from the scripted agent."
    assert "".join(e.delta for e in events if isinstance(e, ThinkingDelta)) == "A greeting."
    assert [e.delta for e in events if isinstance(e, TextDelta)] == ["Hello from ", "the scripted agent."]
    [sub] = session.submissions()
    assert (sub.text, sub.outcome.value, sub.result) == ("hello", "completed", "Hello from the scripted agent.")
    # A second message goes to the same ACP session.
    assert session.prompt("hello again", timeout=60) == "Hello from the scripted agent."
    log = _log(tmp_path)
    assert [e["event"] for e in log] == ["initialize", "new_session", "prompt", "prompt"]
    assert log[0]["client"] == "flue_nb" and log[1]["servers"] == []  # no kernel outside a kernel


@pytest.mark.parametrize(("approval", "written"), [("allow", True), ("deny", False)])
def test_a_permission_request_is_decided_by_flue_nbs_approval(tmp_path, approval, written):
    session = _session(_agent(tmp_path, approval=approval), tmp_path)
    events = list(session.stream("please write a note"))
    [start] = [e for e in events if isinstance(e, ToolStart)]
    assert (start.name, start.input["title"], start.input["input"]) == (
        "acp_edit",
        "Write note.txt",
        {"path": "note.txt"},
    )
    assert start.input["locations"] == [str(tmp_path / "note.txt")]
    [end] = [e for e in events if isinstance(e, ToolEnd)]
    assert end.call_id == start.call_id == "w1"
    assert (tmp_path / "note.txt").exists() is written
    [permission] = [e for e in _log(tmp_path) if e["event"] == "permission"]
    assert permission["option"] == ("yes" if written else "no")
    if written:
        assert (end.is_error, end.content) == (False, "wrote note.txt")
        assert "".join(e.delta for e in events if isinstance(e, TextDelta)) == "Let me write it. Wrote note.txt."
        assert session.submissions()[0].result == "Wrote note.txt."  # the reply after the call
    else:
        assert end.is_error and end.approval is not None and end.approval.reason == "policy"
        assert "denies this `acp_edit` call" in end.content


def test_ask_puts_the_agents_permission_request_to_flue_nbs_approver(tmp_path):
    from flue_nb.notebook.kernel.approve import use_host_approver

    asked: list[Any] = []

    async def approver(request: Any) -> bool:
        asked.append(request)
        return True

    stop = use_host_approver(approver)
    try:
        session = _session(_agent(tmp_path), tmp_path)
        assert session.prompt("write it", timeout=60) == "Wrote note.txt."
    finally:
        stop()
    [request] = asked
    assert (request.tool_name, request.call_id, request.summary) == ("acp_edit", "w1", "acp_edit: Write note.txt")
    assert request.ballot is not None  # recorded in the store: another view could have answered
    [end] = [e for e in session.events() if isinstance(e, ToolEnd)]
    assert end.approval is not None and (end.approval.reason, end.approval.approved) == ("approved", True)


@pytest.fixture
def ipythondir(tmp_path, monkeypatch):
    """A fresh `$IPYTHONDIR`, which the runs-later checks read once per process: read again."""
    from flue_nb.runtime.tools import runs_later

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    runs_later._jupyter_dirs.cache_clear()
    runs_later._jupyter_dirs_as_named.cache_clear()
    yield tmp_path / "ipython"
    runs_later._jupyter_dirs.cache_clear()
    runs_later._jupyter_dirs_as_named.cache_clear()


def test_under_allow_an_agents_write_to_a_startup_dir_is_asked_about_and_a_no_keeps_it_out(tmp_path, ipythondir):
    # Under `allow` flue_nb's own `write` is asked about before it puts a file where IPython
    # runs code at every start; a hosted agent's edit of the same file is too, by its location.
    from flue_nb.notebook.kernel.approve import use_host_approver

    startup = ipythondir / "profile_default" / "startup" / "00-agent.py"
    startup.parent.mkdir(parents=True)
    asked: list[Any] = []

    async def approver(request: Any) -> bool:
        asked.append(request)
        return False

    stop = use_host_approver(approver)
    try:
        session = _session(_agent(tmp_path, approval="allow"), tmp_path)
        assert session.prompt("please write a note", timeout=60) == "Wrote note.txt."  # not asked
        assert asked == []
        assert session.prompt(f"write to {startup}", timeout=60) == "Not written."
    finally:
        stop()
    [request] = asked
    assert request.tool_name == "acp_edit" and "runs code later" in request.rule
    assert not startup.exists()
    assert [e["option"] for e in _log(tmp_path) if e["event"] == "permission"] == ["yes", "no"]
    end = [e for e in session.events() if isinstance(e, ToolEnd)][-1]
    assert end.approval is not None and (end.approval.reason, end.approval.approved) == ("declined", False)


def test_stand_ins_that_change_files_or_run_commands_carry_a_runs_later_check(tmp_path, ipythondir):
    from flue_nb.acp.hosting import Hosted

    startup = str(ipythondir / "profile_default" / "startup" / "x.py")
    for kind in ("read", "search", "fetch", "think", "switch_mode"):
        assert Hosted.decider(f"acp_{kind}").runs_later is None
    for kind in ("edit", "delete", "move", "other", "execute"):
        check = Hosted.decider(f"acp_{kind}").runs_later
        assert check is not None
        assert check({"title": "t", "locations": [startup]}, str(tmp_path)) is not None
        assert check({"title": "t", "locations": [str(tmp_path / "note.txt")]}, str(tmp_path)) is None
    execute = Hosted.decider("acp_execute").runs_later
    assert execute is not None
    assert execute({"title": "Run", "input": {"command": "echo x >> ~/.bashrc"}}, None) is not None
    assert execute({"title": "Run", "input": {"command": ["sh", "-c", "echo x >> ~/.bashrc"]}}, None) is not None
    assert execute({"title": "echo x >> ~/.bashrc", "input": None}, None) is not None
    assert execute({"title": "Run", "input": {"command": "ls -la"}}, None) is None


def test_an_agent_that_reuses_a_finished_calls_id_gets_a_new_call_not_a_hung_turn(tmp_path):
    session = _session(_agent(tmp_path, approval="allow"), tmp_path)
    assert session.prompt("please write a note", timeout=60) == "Wrote note.txt."
    other = tmp_path / "other.txt"
    assert session.prompt(f"write to {other} reuse", timeout=60) == "Wrote note.txt."
    assert other.exists()
    ends = [e for e in session.events() if isinstance(e, ToolEnd)]
    assert [e.call_id for e in ends] == ["w1", "w1~2"]
    assert [e.details["acp"]["tool_call_id"] for e in ends] == ["w1", "w1"]
    assert [e["option"] for e in _log(tmp_path) if e["event"] == "permission"] == ["yes", "yes"]


def test_stop_cancels_the_agents_turn_and_the_run_settles_aborted(tmp_path):
    session = _session(_agent(tmp_path), tmp_path)
    waiting = threading.Event()
    stop = session.observe(lambda e: waiting.set() if isinstance(e, TextDelta) and "Waiting" in e.delta else None)
    receipt = session.dispatch("wait for me")
    assert waiting.wait(60)
    stop()
    session.abort()
    settled = session.wait(receipt, timeout=60)
    assert settled.outcome.value == "aborted"
    for _ in range(100):  # the agent hears the cancel
        if any(e["event"] == "cancel" for e in _log(tmp_path)):
            break
        threading.Event().wait(0.1)
    assert [e["event"] for e in _log(tmp_path)][-1] == "cancel"
    # The session goes on: the next message is a new prompt.
    assert session.prompt("hello", timeout=60) == "Hello from the scripted agent."


def test_an_agent_that_cannot_start_fails_the_run_saying_why(tmp_path):
    before = set(Path(tempfile.gettempdir()).glob("flue-acp-*"))
    agent = host([sys.executable, "-c", "import sys; print('no ACP here', file=sys.stderr); sys.exit(3)"])
    session = _session(agent, tmp_path)
    with pytest.raises(flue.ProviderError, match="could not start the ACP agent.*no ACP here"):
        session.prompt("hello", timeout=60)
    assert hosted_of(agent) is not None and hosted_of(object()) is None
    # Its stderr is read from a file with no name: none is left behind if the kernel is killed.
    assert set(Path(tempfile.gettempdir()).glob("flue-acp-*")) <= before


def test_an_agent_that_dies_mid_turn_fails_the_run_and_the_next_message_starts_it_again(tmp_path):
    session = _session(_agent(tmp_path), tmp_path)
    with pytest.raises(flue.ProviderError, match=r"exited \(status 5\).*dying now"):
        session.prompt("die now", timeout=60)
    assert [s.outcome.value for s in session.submissions()] == ["failed"]
    assert session.prompt("hello", timeout=60) == "Hello from the scripted agent."
    assert [e["event"] for e in _log(tmp_path)].count("new_session") == 2  # a fresh process and session


def test_a_pass_is_one_call_of_the_same_arguments_and_expires(monkeypatch):
    from flue_nb.acp import kernel_calls
    from flue_nb.acp.kernel_calls import PASS_TTL, Passes, arguments_key

    passes = Passes()
    passes.leave('{"code": "x = 1", "b": [1, 2]}')  # an agent may report its input as JSON text
    assert not passes.take(arguments_key({"code": "x = 2"}) or "")
    assert passes.take(arguments_key({"b": [1, 2], "code": "x = 1"}) or "")  # key order does not matter
    assert not passes.take(arguments_key({"b": [1, 2], "code": "x = 1"}) or "")  # used up
    passes.leave({"code": "later"})
    now = kernel_calls.time.monotonic()
    monkeypatch.setattr(kernel_calls.time, "monotonic", lambda: now + PASS_TTL + 1)
    assert not passes.take(arguments_key({"code": "later"}) or "")
    assert arguments_key("not json") is None and arguments_key([1]) is None


@pytest.mark.parametrize(
    ("approval", "runs"),
    [("allow", True), ("deny", False), ("ask", False), ({"default": "ask", "acp_execute": "allow"}, True)],
)
def test_a_call_into_the_kernel_no_card_shows_is_decided_by_the_rules_of_its_kind(monkeypatch, approval, runs):
    import asyncio

    from flue_nb.acp import kernel_calls
    from flue_nb.acp.hosting import Hosted
    from flue_nb.runtime.tools.tool import Tool

    monkeypatch.setattr(kernel_calls, "REPORT_WAIT", 0.05)
    hosted = Hosted(["unused"])
    hosted.tools(approval, lambda: None)
    python = Tool("python", "", dict, None)  # type: ignore[arg-type]  # only its name and flags are read
    read = Tool("read", "", dict, None, read_only=True)  # type: ignore[arg-type]

    refused = asyncio.run(kernel_calls.gate(hosted, python, {"code": "x = 1"}))
    assert (refused is None) == runs, refused
    if refused is not None:
        assert refused.is_error and refused.content.startswith("Not run: ") and refused.approval is not None
        assert ("reported no tool call" in refused.content) == (approval == "ask"), refused.content
    assert asyncio.run(kernel_calls.gate(hosted, read, {"path": "a.txt"})) is None  # read-only: never asked
    asyncio.run(hosted.close())  # its log file goes
