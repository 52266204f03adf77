"""No secret leaves by any path (issue 20.2): errors of agent functions and tools, an MCP server's
stderr and env, the compaction summary, a subagent's stored steps, escaped copies (Python `repr`,
JSON) and copies cut by a clip. Each test puts a known secret in the environment and looks for it
(and for its first characters) where it must not be: what the model got, the error, the store."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.messages import ToolResultMessage
from flue_nb.runtime.redact import redact
from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools.mcp import close_mcp_servers
from flue_nb.runtime.tools.tool import ToolContext, execute_tool

LEAKY = [sys.executable, str(Path(__file__).with_name("mcp_leaky_server.py"))]
SECRET = "sk-live-4f1c9e0b7a2d4c8e9f30b1a2c3d4e5f6"
ODD = "pw\\with\"quote's-and-é-0123456789"  # backslash, both quotes, non-ASCII


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUE_T_API_KEY", SECRET)
    monkeypatch.setenv("FLUE_T_DB_PASSWORD", ODD)


def leaked(text: str) -> bool:
    """True when the secret, or a 10-character piece of its start, is in `text`."""
    return SECRET[:10] in text


def store_bytes(folder: Path, name: str) -> bytes:
    return b"".join(f.read_bytes() for f in folder.glob(f"{name}*"))


def results(request) -> list[ToolResultMessage]:
    return [m for m in request.messages if isinstance(m, ToolResultMessage)]


def test_copies_escaped_by_repr_and_json_are_redacted() -> None:
    for shown in (repr(ODD), json.dumps(ODD), json.dumps(ODD, ensure_ascii=False), repr({"k": ODD})):
        out = redact(f"x {shown} y")
        assert "[redacted:FLUE_T_DB_PASSWORD]" in out, shown
        assert "quote" not in out, out
    # A repr stored as JSON (a dict printed by a tool, then encoded): escaped twice.
    assert "quote" not in redact(json.dumps(repr({"k": ODD})))


def call(tool, raw):
    return asyncio.run(execute_tool(tool, raw, ToolContext(call_id="c1")))


def test_grep_redacts_before_its_500_character_clip(tmp_path: Path) -> None:
    from flue_nb.runtime.tools import grep_tool

    # `conf.txt:1:token=` + 470 characters: the 499-character clip falls 12 characters into it.
    (tmp_path / "conf.txt").write_text("token=" + "a" * 470 + SECRET + "\n")
    out = call(grep_tool(LocalSandbox(tmp_path)), {"pattern": "token="})
    assert "conf.txt:1:token=" in out.content
    assert not leaked(out.content), out.content[-80:]


def test_read_redacts_a_giant_line_before_its_50_kb_cut(tmp_path: Path) -> None:
    from flue_nb.runtime.tools import read_tool

    (tmp_path / "dump.txt").write_text("b" * (51_200 - 12) + SECRET + "b" * 60_000 + "\n")
    out = call(read_tool(LocalSandbox(tmp_path)), {"path": "dump.txt"})
    assert out.content.startswith("bbbb")
    assert not leaked(out.content)


def test_an_agent_function_that_raises_is_an_agent_error_without_the_secret(tmp_path: Path) -> None:
    model = ScriptedModel(["never"])

    @flue.agent
    def leaky_agent() -> str:
        flue.use_model(model)
        raise ValueError(f"could not log in with {SECRET}")

    db = tmp_path / "a.sqlite"
    s = session(leaky_agent, db=str(db))
    with pytest.raises(flue.AgentError) as info:
        s.prompt("hello")
    err = info.value
    assert err.type == "agent_error"
    assert "`leaky_agent` raised ValueError" in err.message
    assert "test_secrets_everywhere.py, line" in err.message and "in leaky_agent" in err.message
    assert not leaked(err.message) and not leaked(str(err))
    assert SECRET[:10].encode() not in store_bytes(tmp_path, "a.sqlite")
    [row] = [h for h in s.history() if getattr(h, "error", None)] or [None]
    assert row is None or not leaked(json.dumps(row.error, default=str))


def test_a_config_error_raised_by_a_tool_is_stored_redacted(tmp_path: Path) -> None:
    @flue.tool
    def deploy() -> str:
        """Deploy."""
        raise ConfigError(f"the deploy key {SECRET} is not allowed here")

    model = ScriptedModel([reply("", tool_call("deploy")), reply("never")])
    db = tmp_path / "t.sqlite"
    with pytest.raises(ConfigError) as info:
        session(make_agent(model, tools=(deploy,)), db=str(db)).prompt("go")
    assert "[redacted:FLUE_T_API_KEY]" in info.value.message
    assert SECRET[:10].encode() not in store_bytes(tmp_path, "t.sqlite")


@pytest.fixture
def _close_servers():
    yield
    close_mcp_servers()


def test_a_key_given_only_through_use_mcp_env_never_reaches_the_model(_close_servers) -> None:
    own = "mcp-only-key-7d1e2f3a4b5c6d7e8f90"
    model = ScriptedModel([reply("", tool_call("mcp__leaky__env_value", name="LEAKY_API_KEY")), reply("ok")])
    agent = make_agent(model, extra=lambda: flue.use_mcp("leaky", command=LEAKY, env={"LEAKY_API_KEY": own}))
    session(agent).prompt("go")
    [result] = results(model.requests[1])
    assert result.content == "[redacted:LEAKY_API_KEY]"


def test_mcp_stderr_is_redacted_in_the_error_and_in_the_stored_roster(tmp_path: Path, _close_servers) -> None:
    env = {"MCP_LEAKY_FAIL_AT_START": "1", "LEAKY_API_KEY": SECRET}
    model = ScriptedModel(["never"])
    agent = make_agent(model, extra=lambda: flue.use_mcp("leaky", command=LEAKY, env=env))
    with pytest.raises(flue.McpConnectionError) as info:
        session(agent).prompt("hello")
    assert "refusing to start" in info.value.message and "[redacted:" in info.value.message
    assert not leaked(info.value.message)

    close_mcp_servers()
    model = ScriptedModel(["ok"])
    agent = make_agent(model, extra=lambda: flue.use_mcp("leaky", command=LEAKY, env=env, optional=True))
    db = tmp_path / "r.sqlite"
    session(agent, db=str(db)).prompt("hello")
    told = json.dumps([m.text for m in model.requests[0].messages if hasattr(m, "text")])
    assert "leaky" in told and not leaked(told)
    assert SECRET[:10].encode() not in store_bytes(tmp_path, "r.sqlite")


def test_the_compaction_summary_is_redacted_before_it_is_stored(tmp_path: Path) -> None:
    model = ScriptedModel(["first answer", "second answer", f"## Goal\nlog in with {SECRET}"])

    @flue.agent
    def forgetful() -> str:
        flue.use_model(model, compaction=flue.CompactionConfig(keep_recent_tokens=5))
        return "You forget."

    db = tmp_path / "c.sqlite"
    s = session(forgetful, db=str(db))
    s.prompt("one")
    s.prompt("two")
    s.compact()
    assert model.requests[-1].purpose == "compaction"
    assert SECRET[:10].encode() not in store_bytes(tmp_path, "c.sqlite")


def test_a_subagents_stored_steps_hold_no_secret(tmp_path: Path) -> None:
    @flue.tool
    def whoami() -> str:
        """Credentials."""
        return f"key={SECRET}"

    child_model = ScriptedModel([reply("", tool_call("whoami")), reply("the child is done")])
    parent_model = ScriptedModel([reply("", tool_call("task", prompt="look", agent="helper")), reply("done")])

    @flue.agent
    def helper() -> str:
        flue.use_model(child_model)
        flue.use_tool(whoami)
        return "You help."

    agent = make_agent(
        parent_model, extra=lambda: flue.use_subagent(flue.define_subagent("helper", "helps", agent=helper))
    )
    db = tmp_path / "d.sqlite"
    assert session(agent, db=str(db)).prompt("go") == "done"
    assert SECRET[:10].encode() not in store_bytes(tmp_path, "d.sqlite")


def test_a_subagents_own_answer_quoting_a_secret_is_stored_and_sent_redacted(tmp_path: Path) -> None:
    # Issue 32.2: the child's answer is what the parent's `task` call returns; its copy among the
    # call's steps and in the task_end event was kept verbatim.
    answer = f"the key is {SECRET}, the password {json.dumps(ODD)} and {ODD}"
    child_model = ScriptedModel([reply(answer)])
    parent_model = ScriptedModel([reply("", tool_call("task", prompt="look", agent="helper")), reply("done")])

    @flue.agent
    def helper() -> str:
        flue.use_model(child_model)
        return "You help."

    agent = make_agent(
        parent_model, extra=lambda: flue.use_subagent(flue.define_subagent("helper", "helps", agent=helper))
    )
    db = tmp_path / "e.sqlite"
    s = session(agent, db=str(db))
    seen: list[str] = []
    s.observe(lambda event: seen.append(repr(event)) if event.type == "task" else None)
    assert s.prompt("go") == "done"
    assert len(seen) == 1 and "the key is [redacted:FLUE_T_API_KEY]" in seen[0]
    stored = store_bytes(tmp_path, "e.sqlite")
    for piece in (SECRET[:10], ODD[:10], json.dumps(ODD)[1:11]):
        assert piece.encode() not in stored, piece
        assert not [e for e in seen if piece in e], piece
    given = results(parent_model.requests[-1])[0].content
    assert "[redacted:FLUE_T_API_KEY]" in str(given) and "[redacted:FLUE_T_DB_PASSWORD]" in str(given)
