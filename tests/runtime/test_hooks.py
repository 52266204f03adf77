"""Hooks and rendering: where hooks may be called, what a render collects, when it happens."""

from __future__ import annotations

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime.agent import define_subagent


def test_hook_outside_a_render_raises_a_clear_error():
    with pytest.raises(flue.HookError, match="outside an agent render"):
        flue.use_model("anthropic/claude-sonnet-4-6")


def test_agent_without_use_model_fails_the_prompt_with_a_hook_error():
    @flue.agent
    def no_model():
        return "hi"

    s = session(no_model)
    with pytest.raises(flue.HookError, match="use_model"):
        s.prompt("hello")


def test_use_model_twice_raises():
    model = ScriptedModel(["never"])

    def twice():
        flue.use_model(model)

    agent = make_agent(model, extra=twice)
    with pytest.raises(flue.HookError, match="twice"):
        session(agent).prompt("hello")
    assert model.requests == []


def test_use_sandbox_twice_in_one_render_raises(tmp_path):
    model = ScriptedModel(["never"])
    agent = make_agent(
        model, sandbox=flue.local(str(tmp_path)), extra=lambda: flue.use_sandbox(flue.local(str(tmp_path)))
    )
    with pytest.raises(flue.HookError, match="at most one sandbox"):
        session(agent).prompt("hello")


def test_use_sandbox_in_a_subagent_render_raises_and_the_task_reports_it(tmp_path):
    @flue.agent
    def child():
        flue.use_sandbox(flue.local(str(tmp_path)))
        return "child"

    model = ScriptedModel([reply("", tool_call("task", prompt="go", agent="kid")), reply("done")])
    agent = make_agent(model, extra=lambda: flue.use_subagent(define_subagent("kid", "a child", agent=child)))
    with pytest.raises(flue.HookError, match="subagent"):
        session(agent).prompt("delegate")


def test_duplicate_tool_names_raise_tool_name_conflict():
    @flue.tool
    def dup() -> str:
        """A tool."""
        return "x"

    model = ScriptedModel(["never"])
    agent = make_agent(model, tools=(dup, dup))
    with pytest.raises(flue.ToolNameConflictError) as exc_info:
        session(agent).prompt("hello")
    assert exc_info.value.type == "tool_name_conflict"
    assert model.requests == []


def test_duplicate_subagent_names_raise():
    model = ScriptedModel(["never"])
    sub = define_subagent("helper", "helps", agent=lambda: "x")
    agent = make_agent(model, extra=lambda: (flue.use_subagent(sub), flue.use_subagent(sub)))
    with pytest.raises(flue.HookError, match="helper"):
        session(agent).prompt("hello")


def test_the_agent_renders_before_every_model_call_in_a_fresh_frame():
    renders = []

    @flue.tool
    def noop() -> str:
        """Does nothing."""
        return "ok"

    model = ScriptedModel([reply("", tool_call("noop")), reply("", tool_call("noop")), reply("end")])

    def count():
        renders.append(object())
        flue.use_tool(noop)  # a fresh frame each time: mounting it again is not a duplicate

    agent = make_agent(model, extra=count)
    assert session(agent).prompt("go") == "end"
    assert len(renders) == len(model.requests) == 3


def test_tool_decorator_builds_schema_from_type_hints_and_docstring():
    @flue.tool
    def load_table(path: str, limit: int = 5) -> str:
        """Load a CSV and return its first rows.

        Args:
            path: Where the CSV is.
            limit: How many rows.
        """
        return path

    spec = load_table.spec()
    assert spec.name == "load_table"
    assert spec.description == "Load a CSV and return its first rows."
    props = spec.input_schema["properties"]
    assert props["path"]["type"] == "string" and props["path"]["description"] == "Where the CSV is."
    assert props["limit"]["default"] == 5 and props["limit"]["type"] == "integer"
    assert spec.input_schema["required"] == ["path"]


def test_define_tool_takes_a_pydantic_model_and_run_function():
    from pydantic import BaseModel

    class Query(BaseModel):
        q: str

    t = flue.define_tool("search", "Search things.", input=Query, run=lambda args: f"found {args.q}")
    model = ScriptedModel([reply("", tool_call("search", q="cats")), reply("ok")])
    agent = make_agent(model, tools=(t,))
    assert session(agent).prompt("find") == "ok"
    assert model.requests[1].messages[-1].content == "found cats"


def test_define_tool_rejects_a_non_pydantic_input():
    with pytest.raises(flue.ConfigError, match="BaseModel"):
        flue.define_tool("x", "y", input=dict, run=lambda a: a)  # type: ignore[arg-type]


def test_persistent_state_is_read_at_render_and_written_by_the_setter(tmp_path):
    db = str(tmp_path / "s.sqlite")
    seen = []
    latest = {}  # what the last render saw: the value and its setter

    @flue.tool
    def bump() -> str:
        """Bump the counter."""
        latest["set"](latest["value"] + 1)
        return "bumped"

    def state():
        latest["value"], latest["set"] = flue.use_persistent_state("count", 0)
        seen.append(latest["value"])

    model = ScriptedModel([reply("", tool_call("bump")), reply("one"), reply("", tool_call("bump")), reply("two")])
    agent = make_agent(model, tools=(bump,), extra=state)
    s = session(agent, db=db, conversation="state")
    s.prompt("a")
    s.prompt("b")
    assert seen == [0, 1, 1, 2]
    assert s.store.state("state") == {"count": 2}
