"""Subagents and the `task` tool (contract 8.1, 14)."""

from __future__ import annotations

from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime.agent import define_subagent
from flue_nb.runtime.messages import ToolResultMessage, UserMessage


def results(request):
    return [m for m in request.messages if isinstance(m, ToolResultMessage)]


def test_task_8_1_is_always_present_and_an_unknown_agent_lists_the_available_ones():
    model = ScriptedModel([reply("", tool_call("task", prompt="x", agent="ghost")), reply("ok")])
    sub = define_subagent("writer", "Writes prose", agent=lambda: "w")
    session(make_agent(model, extra=lambda: flue.use_subagent(sub))).prompt("go")
    assert [t.name for t in model.requests[0].tools] == ["task"]
    (res,) = results(model.requests[1])
    assert res.is_error and "ghost" in res.content and "`writer`" in res.content


def test_task_8_1_is_inert_without_declared_subagents():
    model = ScriptedModel([reply("", tool_call("task", prompt="x", agent="any")), reply("ok")])
    session(make_agent(model)).prompt("go")
    (res,) = results(model.requests[1])
    assert res.is_error and "declares no subagents" in res.content


def test_delegation_14_2_child_has_fresh_context_shares_sandbox_inherits_model_returns_final_text(tmp_path):
    (tmp_path / "notes.txt").write_text("child can see this")

    @flue.agent
    def child():
        return "You are the child."

    # One scripted model serves both: the child inherits the parent's model (14.2).
    model = ScriptedModel(
        [
            reply("", tool_call("task", prompt="read notes.txt", agent="kid", description="read the notes")),
            reply("", tool_call("read", path="notes.txt")),
            reply("The notes say: child can see this."),
            reply("Parent done."),
        ]
    )
    sub = define_subagent("kid", "Reads files", agent=child)
    events = []
    s = session(make_agent(model, sandbox=flue.local(str(tmp_path)), extra=lambda: flue.use_subagent(sub)))
    s.observe(events.append)
    assert s.prompt("delegate it") == "Parent done."
    child_first = model.requests[1]
    assert child_first.system.startswith("You are the child.") and str(tmp_path) in child_first.system
    assert [type(m) for m in child_first.messages] == [UserMessage] and child_first.messages[0].text == "read notes.txt"
    assert results(model.requests[2])[0].content == "child can see this"
    (task_result,) = results(model.requests[3])
    assert task_result.content == "The notes say: child can see this." and not task_result.is_error
    types = [e.type for e in events]
    assert "task_start" in types and "task" in types
    child_tools = [e for e in events if e.type == "tool" and e.task_id is not None]
    assert [e.name for e in child_tools] == ["read"]
    # The child's messages are not in the parent's durable history.
    assert not any(isinstance(m, UserMessage) and m.text == "read notes.txt" for m in s.history())


def test_delegation_14_2_a_subagent_may_name_its_own_model():
    own = ScriptedModel(["from the child's own model"])

    @flue.agent
    def child():
        flue.use_model(own)
        return "child"

    parent_model = ScriptedModel([reply("", tool_call("task", prompt="hi", agent="kid")), reply("done")])
    sub = define_subagent("kid", "kid", agent=child)
    session(make_agent(parent_model, extra=lambda: flue.use_subagent(sub))).prompt("go")
    assert results(parent_model.requests[1])[0].content == "from the child's own model"
    own.assert_complete()


def test_delegation_14_2_a_task_cwd_scopes_the_shared_sandbox(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.txt").write_text("inside")
    model = ScriptedModel(
        [
            reply("", tool_call("task", prompt="read inner", agent="kid", cwd="sub")),
            reply("", tool_call("read", path="inner.txt")),
            reply("got it"),
            reply("done"),
        ]
    )
    sub = define_subagent("kid", "kid", agent=lambda: "child")
    session(make_agent(model, sandbox=flue.local(str(tmp_path)), extra=lambda: flue.use_subagent(sub))).prompt("go")
    assert results(model.requests[2])[0].content == "inside"
    assert str(tmp_path / "sub") in model.requests[1].system


def test_delegation_14_1_a_chain_of_five_fails_at_depth_five_as_an_error_result():
    def chain_agent():
        flue.use_subagent(define_subagent("deeper", "goes deeper", agent=chain_agent))
        return "link"

    steps = [reply("", tool_call("task", prompt=f"level {i + 1}", agent="deeper")) for i in range(5)]
    steps += [reply(f"answer {i}") for i in range(4, -1, -1)]
    model = ScriptedModel(steps)
    root = make_agent(
        model, extra=lambda: flue.use_subagent(define_subagent("deeper", "goes deeper", agent=chain_agent))
    )
    assert session(root).prompt("go deep") == "answer 0"
    model.assert_complete()
    # Request 5 is the depth-4 child after its own task call failed at depth 5.
    (failed,) = results(model.requests[5])
    assert failed.is_error and "delegation_depth_exceeded" in failed.content
    assert results(model.requests[6])[0].content == "answer 4"


def test_delegation_a_tasks_cwd_view_keeps_the_parents_streaming_writes(tmp_path):
    import asyncio

    from flue_nb.runtime.core.delegation import ScopedSandbox, scoped
    from flue_nb.runtime.sandbox import Sandbox, StreamingWrites

    (tmp_path / "sub").mkdir()
    view = scoped(flue.local(str(tmp_path)), "sub")
    assert isinstance(view, Sandbox) and isinstance(view, StreamingWrites)

    async def chunks():
        yield b"big "
        yield b"file"

    assert asyncio.run(view.write_chunks("out.txt", chunks())) == 8
    assert (tmp_path / "sub" / "out.txt").read_bytes() == b"big file"

    class Plain(ScopedSandbox):  # a sandbox without the capability: the view has none either
        pass

    plain = scoped(Plain(flue.local(str(tmp_path)), str(tmp_path)), "sub")
    assert isinstance(plain, Sandbox) and not isinstance(plain, StreamingWrites)
