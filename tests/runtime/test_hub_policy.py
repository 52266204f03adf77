"""Approval rules and the hub policy (issue 36.1-2, 36.4, 36.6): MCP annotations under `deny`,
conversation grants, the policy's model allow-list, its approval ceiling, its MCP allow-list and
per-user spending limits counted in a shared store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.notebook.kernel.sandbox import kernel
from flue_nb.runtime.core.run_settings import RunSettings
from flue_nb.runtime.errors import ConfigError, PolicyDeniedError
from flue_nb.runtime.policy import HubPolicy, check_mcp_servers, load_policy, policy_path, set_policy
from flue_nb.runtime.tools.approval import ApprovalRequest
from flue_nb.runtime.tools.mcp import McpServer, McpTool
from flue_nb.runtime.tools.rules import ApprovalRules
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput, execute_tool

SONNET = "claude-sonnet-4-6"  # $3 / $15 per million tokens


@pytest.fixture(autouse=True)
def no_policy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("FLUE_POLICY", raising=False)
    set_policy(None)
    yield
    set_policy(None)


class _Any(BaseModel):
    model_config = {"extra": "allow"}


def _mcp(name: str, calls: list[str], *, read_only: bool) -> McpTool:
    async def run(args: BaseModel, ctx: ToolContext) -> str:
        calls.append(name)
        return "done"

    return McpTool(f"mcp__srv__{name}", name, _Any, run, server="srv", remote_name=name, read_only=read_only)


def _call(tool: Tool, raw: dict[str, object], ctx: ToolContext | None = None) -> ToolOutput:
    return asyncio.run(execute_tool(tool, raw, ctx or ToolContext(call_id="c1")))


def test_an_mcp_tool_marked_read_only_runs_under_deny_and_a_destructive_one_does_not(tmp_path: Path) -> None:
    calls: list[str] = []
    box = kernel(tmp_path, namespace={}, approval="deny")
    reader, deleter = box.guard([_mcp("list", calls, read_only=True), _mcp("delete", calls, read_only=False)])
    assert not _call(reader, {}).is_error
    out = _call(deleter, {})
    assert out.is_error and "policy denies" in out.content and "destructive" in out.content
    assert calls == ["list"]
    assert box.guard([reader])[0] is box.guard([reader])[0]  # wrapped once, not at every render


def test_a_custom_tool_is_covered_unless_it_declares_read_only(tmp_path: Path) -> None:
    @flue.tool
    def send(to: str) -> str:
        """Send a message."""
        return f"sent to {to}"

    @flue.tool(read_only=True)
    def look(name: str) -> str:
        """Look something up."""
        return f"found {name}"

    box = kernel(tmp_path, namespace={}, approval="deny")
    sent, looked = box.guard([send, look])
    assert _call(sent, {"to": "x"}).is_error
    assert _call(looked, {"name": "y"}).content == "found y"


def test_rules_are_data_checked_when_given(tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"default": "ask", "bash": ["ls *", ["rm *", "deny"]], "write": [["data/**", "allow"]]}))
    rules = ApprovalRules.of(str(path))
    assert rules.to_data() == {
        "default": "ask",
        "bash": [["ls *", "allow"], ["rm *", "deny"]],
        "write": [["data/**", "allow"]],
    }
    with pytest.raises(ConfigError, match=r"\[PATTERN, MODE\]"):
        ApprovalRules.of({"bash": [["ls", "maybe"]]})
    with pytest.raises(ConfigError, match="unknown tools"):
        kernel(tmp_path, namespace={}, approval={"pyhton": "deny"}).tools()


def test_always_allow_for_this_conversation_is_kept_in_the_store_and_revocable(tmp_path: Path) -> None:
    asked: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> bool:
        asked.append(request)
        return False

    model = ScriptedModel([
        reply("", tool_call("bash", "a", command="echo one")),
        reply("first"),
        reply("", tool_call("bash", "b", command="echo one")),
        reply("second"),
        reply("", tool_call("bash", "c", command="echo one")),
        reply("third"),
    ])  # fmt: skip

    @flue.agent
    def worker() -> str:
        flue.use_model(model)
        flue.use_sandbox(kernel(tmp_path, namespace={}, approval="ask", approver=approver, sandbox="none"))
        return "Work."

    s = flue.init(worker, db=str(tmp_path / "s.sqlite"), conversation="c", settings=RunSettings())

    def last() -> ToolOutput:
        r = [m for m in model.requests[-1].messages if m.kind == "tool_result"][-1]
        return r  # type: ignore[return-value]

    s.prompt("one")
    assert last().is_error and len(asked) == 1
    offered = asked[0].grant
    assert offered is not None and (offered.tool, offered.pattern) == ("bash", "echo one")
    s.allow(offered.tool, offered.pattern)
    # Another reader of the same store sees the grant (it is kept with the conversation).
    from flue_nb.runtime.session import open_conversation
    from flue_nb.runtime.tools.grants import grants

    reader = open_conversation("c", db=str(tmp_path / "s.sqlite"))
    assert [g.describe() for g in grants(reader.store, "c")] == ["bash 'echo one'"]
    s.prompt("two")
    assert not last().is_error and len(asked) == 1
    assert last().approval is not None and "allowed for this conversation: bash 'echo one'" in last().approval.rule
    assert [g.describe() for g in s.revoke("bash")] == ["bash 'echo one'"]
    s.prompt("three")
    assert last().is_error and len(asked) == 2


def _policy(**kw: object) -> HubPolicy:
    return HubPolicy(source="/etc/jupyter/flue_policy.json", **kw)  # type: ignore[arg-type]


def test_a_model_outside_the_policy_is_refused_naming_the_policy(tmp_path: Path) -> None:
    set_policy(_policy(models=("anthropic/claude-*",)))
    model = ScriptedModel([reply("never")], id="gpt-5")

    @flue.agent
    def outsider() -> str:
        flue.use_model(model)
        return "Hi."

    s = flue.init(outsider, db=str(tmp_path / "s.sqlite"), settings=RunSettings())
    with pytest.raises(PolicyDeniedError, match=r"/etc/jupyter/flue_policy\.json.*`flue_nb/gpt-5`") as caught:
        s.prompt("hello")
    assert caught.value.type == "policy_denied" and model.requests == []
    set_policy(_policy(models=("*/gpt-5",)))
    assert s.prompt("hello") == "never"


def test_a_policy_forbidding_allow_clamps_the_setting_and_says_so(tmp_path: Path) -> None:
    set_policy(_policy(approval_max="ask"))
    with pytest.warns(
        UserWarning, match=r"hub policy \(/etc/jupyter/flue_policy\.json\) allows approval at most `ask`"
    ):
        box = kernel(tmp_path, namespace={}, approval="allow")
    assert "at most ask" in box.rules.describe()
    out = _call(next(t for t in box.tools() if t.name == "python"), {"code": "1"})
    assert out.is_error and "headless" in out.content  # asked (no one to ask: the fallback refused)
    assert out.approval is not None and "allows at most ask" in (out.approval.rule or "")


def test_the_policy_sandbox_requirement_turns_none_into_auto(tmp_path: Path) -> None:
    set_policy(_policy(sandbox_require=True))
    with pytest.warns(UserWarning, match="requires the shell sandbox"):
        box = kernel(tmp_path, namespace={}, sandbox="none")
    assert box.containment.level != "none"


def test_an_mcp_server_outside_the_policy_is_refused(tmp_path: Path) -> None:
    set_policy(_policy(mcp=("npx -y @modelcontextprotocol/*", "http://mcp.localhost/*")))
    check_mcp_servers([McpServer("ok", url="http://mcp.localhost/x")])
    with pytest.raises(PolicyDeniedError, match=r"MCP server `evil` \(python evil\.py\)"):
        check_mcp_servers([McpServer("evil", command=("python", "evil.py"))])


def test_the_policy_file_is_found_by_variable_or_in_a_jupyter_config_dir(tmp_path, monkeypatch) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "flue_policy.json").write_text(
        json.dumps({"approval": {"max": "ask"}, "spend": {"per_user_per_day_usd": 2}})
    )
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(conf))
    assert policy_path() == str(conf / "flue_policy.json")
    policy = load_policy()
    assert policy is not None and policy.approval_max == "ask" and policy.per_day_usd == 2.0
    named = tmp_path / "p.yaml"
    named.write_text("models:\n  allow: ['anthropic/*']\nuser:\n  env: HUB_USER\n")
    monkeypatch.setenv("FLUE_POLICY", str(named))
    policy = load_policy()
    assert policy is not None and policy.models == ("anthropic/*",) and policy.user_env == "HUB_USER"
    (tmp_path / "bad.json").write_text(json.dumps({"approval": {"max": "sometimes"}}))
    with pytest.raises(ConfigError, match=r"bad\.json: `approval.max`"):
        load_policy(str(tmp_path / "bad.json"))


def _spender(tmp_path: Path, db: str, conversation: str) -> tuple[flue.Session, ScriptedModel]:
    # Each answer costs 10,000 in and 1,000 out: $0.045 at Sonnet's list prices.
    model = ScriptedModel([reply(f"answer {i}", usage=(10_000, 1_000)) for i in range(3)], id=SONNET)

    @flue.agent
    def spender() -> str:
        flue.use_model(model)
        return "Answer."

    return flue.init(spender, db=db, conversation=conversation, settings=RunSettings()), model


def test_two_users_on_one_postgres_store_each_stop_at_their_own_daily_limit(tmp_path, pg_url, monkeypatch) -> None:
    set_policy(_policy(per_day_usd=0.05, user_env="FLUE_TEST_HUB_USER"))
    ann, ann_model = _spender(tmp_path, pg_url, "ann-notebook")
    bob, bob_model = _spender(tmp_path, pg_url, "bob-notebook")  # another notebook, its own store connection
    monkeypatch.setenv("FLUE_TEST_HUB_USER", "ann")
    assert ann.prompt("one") == "answer 0"
    with pytest.raises(PolicyDeniedError, match=r"user `ann` has spent \$0\.0450 of the \$0\.05 daily limit"):
        ann.prompt("two")
    assert len(ann_model.requests) == 1  # refused before the call, not after
    monkeypatch.setenv("FLUE_TEST_HUB_USER", "bob")
    assert bob.prompt("one") == "answer 0"  # ann's spending is not bob's
    with pytest.raises(PolicyDeniedError, match="user `bob`"):
        bob.prompt("two")
    # Counted in the store, across conversations: a fresh reader sees both users' spending.
    from flue_nb.runtime.session import store_for

    store = store_for(pg_url, str(tmp_path))[0]
    assert store.spent("ann", since=0) == pytest.approx(0.045) and store.spent("bob", since=0) == pytest.approx(0.045)
    lines = "\n".join(_policy(per_day_usd=0.05, user_env="FLUE_TEST_HUB_USER").describe(store))
    assert "spent today by bob: $0.0450 of $0.05" in lines
