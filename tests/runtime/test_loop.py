"""The turn loop and the tool set (contract 1), environment (9) and context composition (12)."""

from __future__ import annotations

import asyncio

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime.agent import define_subagent
from flue_nb.runtime.messages import SignalMessage, ToolResultMessage, UserMessage
from flue_nb.runtime.tools import standard_tools

SIX = ["read", "write", "edit", "bash", "grep", "glob"]


def tool_names(request):
    return [t.name for t in request.tools]


def signals(request):
    return [m for m in request.messages if isinstance(m, SignalMessage)]


def write_skill(folder, name, description, body="Do the thing.", resources=()):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}\n")
    for rel, text in resources:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


# --- 1. the tool set ------------------------------------------------------------------------


def test_tools_1_1_sandbox_gives_exactly_the_six_tools(tmp_path):
    model = ScriptedModel(["hi"])
    session(make_agent(model, sandbox=flue.local(str(tmp_path)))).prompt("hello")
    assert tool_names(model.requests[0])[:6] == SIX
    assert tool_names(model.requests[0]) == [*SIX, "task"]


def test_tools_1_1_no_sandbox_means_none_of_the_six():
    model = ScriptedModel(["hi"])
    session(make_agent(model)).prompt("hello")
    assert tool_names(model.requests[0]) == ["task"]


def test_tools_1_2_order_sandbox_task_activate_skill_read_skill_resource_own(tmp_path):
    skill = write_skill(tmp_path / "skills" / "csv", "csv", "Reads CSVs", resources=[("ref.md", "notes")])

    @flue.tool
    def mine() -> str:
        """Mine."""
        return "m"

    model = ScriptedModel(["hi"])
    agent = make_agent(model, sandbox=flue.local(str(tmp_path)), tools=(mine,), extra=lambda: flue.use_skill(skill))
    session(agent).prompt("hello")
    assert tool_names(model.requests[0]) == [*SIX, "task", "activate_skill", "read_skill_resource", "mine"]


def test_tools_1_3_a_sandbox_tool_list_replaces_the_six(tmp_path):
    from flue_nb.runtime.sandbox.local import LocalSandbox

    class OnlyRead(LocalSandbox):
        def tools(self):
            return standard_tools(self)[:1]

    model = ScriptedModel(["hi"])
    session(make_agent(model, sandbox=OnlyRead(str(tmp_path)))).prompt("hello")
    assert tool_names(model.requests[0]) == ["read", "task"]


@pytest.mark.parametrize("reserved", ["task", "activate_skill", "read_skill_resource"])
def test_tools_1_4_reserved_names_raise_before_any_model_call(reserved):
    t = flue.tool(lambda: "x", name=reserved, description="clash")
    model = ScriptedModel(["never"])
    with pytest.raises(flue.ToolNameConflictError, match="reserved"):
        session(make_agent(model, tools=(t,))).prompt("hello")
    assert model.requests == []


def test_tools_1_4_own_tool_named_like_a_sandbox_tool_conflicts(tmp_path):
    t = flue.tool(lambda: "x", name="read", description="clash")
    model = ScriptedModel(["never"])
    with pytest.raises(flue.ToolNameConflictError):
        session(make_agent(model, sandbox=flue.local(str(tmp_path)), tools=(t,))).prompt("hello")
    assert model.requests == []


def test_tools_1_5_calls_of_one_message_run_concurrently():
    # Each tool waits for the other to start: run one after the other, this would time out.
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def wait_for_other(me: str, other: str) -> str:
        started[me].set()
        await asyncio.wait_for(started[other].wait(), 5)
        return f"{me} saw {other}"

    async def ta() -> str:
        """a"""
        return await wait_for_other("a", "b")

    async def tb() -> str:
        """b"""
        return await wait_for_other("b", "a")

    model = ScriptedModel([reply("", tool_call("ta"), tool_call("tb")), reply("done")])
    assert session(make_agent(model, tools=(flue.tool(ta), flue.tool(tb)))).prompt("go") == "done"
    results = [m for m in model.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert [(r.content, r.is_error) for r in results] == [("a saw b", False), ("b saw a", False)]


def test_tools_1_5_a_raising_tool_becomes_an_error_result_and_the_loop_goes_on():
    @flue.tool
    def boom() -> str:
        """Always fails."""
        raise ValueError("the widget is broken")

    model = ScriptedModel([reply("", tool_call("boom")), reply("recovered")])
    assert session(make_agent(model, tools=(boom,))).prompt("go") == "recovered"
    result = model.requests[1].messages[-1]
    assert result.is_error and "the widget is broken" in result.content


def test_tools_1_5_config_errors_from_tool_code_propagate_and_fail_the_submission():
    @flue.tool
    def misuse() -> str:
        """Misuses the API."""
        raise flue.ConfigError("developer bug")

    model = ScriptedModel([reply("", tool_call("misuse")), reply("never")])
    s = session(make_agent(model, tools=(misuse,)))
    with pytest.raises(flue.ConfigError, match="developer bug"):
        s.prompt("go")
    assert s.submissions()[0].outcome.value == "failed"


def test_tools_1_6_invalid_input_is_an_error_result_naming_the_field():
    @flue.tool
    def needs_int(count: int) -> str:
        """Needs an int."""
        return str(count)

    model = ScriptedModel(
        [reply("", tool_call("needs_int", count="many"), tool_call("needs_int", nope=1)), reply("ok")]
    )
    session(make_agent(model, tools=(needs_int,))).prompt("go")
    first, second = [m for m in model.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert first.is_error and "`count`" in first.content
    assert second.is_error and "`nope`" in second.content


def test_unknown_tool_name_is_an_error_result_listing_the_tools():
    model = ScriptedModel([reply("", tool_call("nonexistent")), reply("ok")])
    session(make_agent(model)).prompt("go")
    result = model.requests[1].messages[-1]
    assert result.is_error and "nonexistent" in result.content and "`task`" in result.content


# --- 9. environment ---------------------------------------------------------------------------


def test_environment_9_2_no_sandbox_means_no_workspace_text_and_no_workspace_skills(tmp_path, monkeypatch):
    write_skill(tmp_path / ".agents" / "skills" / "ws", "ws", "workspace skill")
    monkeypatch.chdir(tmp_path)
    model = ScriptedModel(["hi"])
    session(make_agent(model)).prompt("hello")
    assert "Working directory" not in model.requests[0].system
    assert "ws" not in model.requests[0].system
    assert tool_names(model.requests[0]) == ["task"]


def test_environment_9_2_require_sandbox_raises_no_sandbox():
    from flue_nb.runtime.tools.tool import ToolContext

    with pytest.raises(flue.NoSandboxError) as exc_info:
        ToolContext("c1").require_sandbox()
    assert exc_info.value.type == "no_sandbox" and "use_sandbox" in str(exc_info.value)


def test_environment_9_3_attaching_mid_window_swaps_before_the_next_call_with_one_signal(tmp_path):
    attach = {"on": False}
    box = flue.local(str(tmp_path))

    @flue.tool
    def flip() -> str:
        """Attach the sandbox."""
        attach["on"] = True
        return "flipped"

    def maybe():
        if attach["on"]:
            flue.use_sandbox(box)

    model = ScriptedModel([reply("", tool_call("flip")), reply("done")])
    session(make_agent(model, tools=(flip,), extra=maybe)).prompt("go")
    assert tool_names(model.requests[0]) == ["task", "flip"]
    assert tool_names(model.requests[1]) == [*SIX, "task", "flip"]
    sigs = signals(model.requests[1])
    assert len(sigs) == 1 and sigs[0].signal_type == "environment"
    text = sigs[0].text
    assert str(tmp_path) in text and "`read`" in text and "`flip`" in text and "may be gone" in text
    assert model.requests[0].system == model.requests[1].system  # still frozen


def test_environment_9_3_detaching_is_narrated_too(tmp_path):
    attach = {"on": True}

    @flue.tool
    def detach() -> str:
        """Detach the sandbox."""
        attach["on"] = False
        return "gone"

    model = ScriptedModel([reply("", tool_call("detach")), reply("done")])
    agent = make_agent(
        model, tools=(detach,), extra=lambda: flue.use_sandbox(flue.local(str(tmp_path))) if attach["on"] else None
    )
    session(agent).prompt("go")
    assert tool_names(model.requests[1]) == ["task", "detach"]
    (sig,) = signals(model.requests[1])
    assert sig.signal_type == "environment" and "detached" in sig.text


def test_environment_9_4_the_sandbox_factory_is_built_once_per_submission(tmp_path):
    built = []

    def factory():
        built.append(1)
        return flue.local(str(tmp_path))

    model = ScriptedModel(
        [
            reply("", tool_call("glob", pattern="*")),
            reply("", tool_call("glob", pattern="*")),
            reply("one"),
            reply("two"),
        ]
    )
    agent = make_agent(model, sandbox=factory)
    s = session(agent)
    s.prompt("a")
    assert len(built) == 1
    s.prompt("b")
    assert len(built) == 2


# --- 12. context composition ----------------------------------------------------------------------


def test_context_12_1_prompt_has_instructions_cwd_listing_agents_md_and_rosters(tmp_path):
    (tmp_path / "AGENTS.md").write_text("Always use tabs.")
    (tmp_path / "data.csv").write_text("a,b\n")
    (tmp_path / "src").mkdir()
    write_skill(tmp_path / ".agents" / "skills" / "plot", "plot", "Makes plots")
    sub = define_subagent("reviewer", "Reviews code changes", agent=lambda: "review")
    model = ScriptedModel(["hi"])
    agent = make_agent(
        model,
        sandbox=flue.local(str(tmp_path)),
        instructions="You are a careful analyst.",
        extra=lambda: (flue.use_subagent(sub), flue.use_instruction("Be brief.")),
    )
    session(agent).prompt("hello")
    system = model.requests[0].system
    order = [
        system.index(s)
        for s in (
            "You are a careful analyst.",
            "Be brief.",
            str(tmp_path),
            "data.csv",
            "Always use tabs.",
            "plot: Makes plots",
            "reviewer: Reviews code changes",
        )
    ]
    assert order == sorted(order)
    assert "src/" in system


def test_context_12_2_the_system_prompt_is_byte_identical_across_turns_and_submissions(tmp_path):
    @flue.tool
    def touch(name: str) -> str:
        """Create a file."""
        (tmp_path / name).write_text("x")
        return "made"

    model = ScriptedModel([reply("", tool_call("touch", name="new.txt")), reply("one"), reply("two")])
    s = session(make_agent(model, sandbox=flue.local(str(tmp_path)), tools=(touch,)))
    s.prompt("a")
    s.prompt("b")
    systems = {r.system.encode() for r in model.requests}
    assert len(systems) == 1
    assert "new.txt" not in model.requests[-1].system  # the listing is the one from initialisation


def test_context_12_2_a_tool_mounted_mid_window_arrives_as_a_resources_signal():
    mounted = {"on": False}

    @flue.tool
    def later() -> str:
        """Mounted later."""
        return "x"

    @flue.tool
    def mount() -> str:
        """Mount `later`."""
        mounted["on"] = True
        return "mounted"

    model = ScriptedModel([reply("", tool_call("mount")), reply("done")])
    agent = make_agent(model, tools=(mount,), extra=lambda: flue.use_tool(later) if mounted["on"] else None)
    session(agent).prompt("go")
    (sig,) = signals(model.requests[1])
    assert sig.signal_type == "resources" and "Mounted tools: `later`" in sig.text
    assert sig.render().startswith('<signal type="resources">')
    assert model.requests[0].system == model.requests[1].system
    assert tool_names(model.requests[1]) == ["task", "mount", "later"]


def test_context_12_2_signals_are_user_role_and_append_only():
    mounted = {"on": False}

    @flue.tool
    def mount() -> str:
        """Mount."""
        mounted["on"] = not mounted["on"]
        return "toggled"

    extra_tool = flue.tool(lambda: "x", name="extra", description="extra")
    model = ScriptedModel([reply("", tool_call("mount")), reply("", tool_call("mount")), reply("done")])
    agent = make_agent(model, tools=(mount,), extra=lambda: flue.use_tool(extra_tool) if mounted["on"] else None)
    session(agent).prompt("go")
    before = model.requests[1].messages
    after = model.requests[2].messages
    assert after[: len(before)] == before  # nothing earlier was rewritten
    texts = [s.text for s in signals(model.requests[2])]
    assert any("Mounted tools: `extra`" in t for t in texts) and any("Unmounted tools: `extra`" in t for t in texts)


def test_context_12_2_the_frozen_prompt_survives_a_reopened_session(tmp_path):
    db = str(tmp_path / "c.sqlite")
    (tmp_path / "first.txt").write_text("1")
    model = ScriptedModel(["a", "b"])
    agent = make_agent(model, sandbox=flue.local(str(tmp_path)))
    session(agent, db=db, conversation="frozen").prompt("one")
    (tmp_path / "second.txt").write_text("2")
    session(agent, db=db, conversation="frozen").prompt("two")
    assert model.requests[0].system == model.requests[1].system
    assert "second.txt" not in model.requests[1].system


# --- 8. skills ----------------------------------------------------------------------------------


def test_skills_8_2_activate_skill_returns_instructions_and_unknown_lists_the_available(tmp_path):
    skill = write_skill(tmp_path / "tidy", "tidy", "Tidies data", body="Step 1: tidy.\nStep 2: check.")
    model = ScriptedModel(
        [reply("", tool_call("activate_skill", name="tidy"), tool_call("activate_skill", name="nope")), reply("ok")]
    )
    session(make_agent(model, extra=lambda: flue.use_skill(skill))).prompt("go")
    ok, bad = [m for m in model.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert "Step 1: tidy." in ok.content and not ok.is_error
    assert bad.is_error and "`tidy`" in bad.content


def test_skills_8_2_workspace_skills_are_discovered_with_a_sandbox(tmp_path):
    write_skill(tmp_path / ".agents" / "skills" / "lint", "lint", "Lints code", body="Run the linter.")
    model = ScriptedModel([reply("", tool_call("activate_skill", name="lint")), reply("ok")])
    session(make_agent(model, sandbox=flue.local(str(tmp_path)))).prompt("go")
    assert "lint: Lints code" in model.requests[0].system
    assert "Run the linter." in model.requests[1].messages[-1].content
    assert "read_skill_resource" not in tool_names(model.requests[0])


def test_skills_8_3_read_skill_resource_reads_with_reads_paging(tmp_path):
    lines = "\n".join(f"line {i}" for i in range(1, 3001))
    skill = write_skill(tmp_path / "big", "big", "Has a big file", resources=[("ref/data.txt", lines)])
    model = ScriptedModel(
        [
            reply(
                "",
                tool_call("read_skill_resource", skill="big", path="ref/data.txt"),
                tool_call("read_skill_resource", skill="big", path="ref/data.txt", offset=2999),
                tool_call("read_skill_resource", skill="big", path="../escape.txt"),
            ),
            reply("ok"),
        ]
    )
    session(make_agent(model, extra=lambda: flue.use_skill(skill))).prompt("go")
    first, second, escape = [m for m in model.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert "Use offset=2001 to continue." in first.content and "line 2001" not in first.content.split("\n")[-3:]
    assert second.content.startswith("line 2999")
    assert escape.is_error and "not a resource" in escape.content


def test_skill_without_front_matter_is_a_config_error(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "SKILL.md").write_text("no front matter")
    model = ScriptedModel(["never"])
    with pytest.raises(flue.ConfigError, match="front matter"):
        session(make_agent(model, extra=lambda: flue.use_skill(tmp_path / "bad"))).prompt("go")


def test_a_conversation_turn_includes_the_user_message_first():
    model = ScriptedModel(["hi"])
    session(make_agent(model)).prompt("hello there")
    (msg,) = model.requests[0].messages
    assert isinstance(msg, UserMessage) and msg.text == "hello there"
