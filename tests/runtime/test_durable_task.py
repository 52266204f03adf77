"""Durable subagents (contract 11.2, issue 12.13): a `task` cut off by a crash resumes its child.

A process runs an agent that delegates to a subagent; it is SIGKILLed while the subagent's own
tool runs. The next process recovers the submission: the `task` call is not marked "outcome
unknown" but re-run, and the subagent continues from its recorded messages (its prompt, its
tool call), with its interrupted tool call closed as unknown, as the parent's would be.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import flue_nb as flue
from flue_nb.models import FunctionModel
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.messages import AssistantMessage, ToolResultMessage, UserMessage

AGENTS = textwrap.dedent(
    """
    import os, sys, time
    import flue_nb as flue
    from flue_nb.models import FunctionModel, reply, tool_call

    CHILD_MODEL_CALLS = []

    @flue.tool
    def work() -> str:
        "Do the subagent's slow work."
        if os.environ.get("FLUE_TEST_BLOCK"):
            print("in work", flush=True)
            time.sleep(600)
        return "worked"

    def parent_answer(request):
        last = request.messages[-1]
        if last.kind == "tool_result":
            return reply("parent done: " + last.content)
        return reply("", tool_call("task", prompt="do the sub work", agent="helper"))

    def child_answer(request):
        CHILD_MODEL_CALLS.append([m.kind for m in request.messages])
        if any(m.kind == "tool_result" for m in request.messages):
            return reply("child done after " + request.messages[-1].content[:40])
        return reply("", tool_call("work"))

    @flue.agent
    def helper_fn():
        flue.use_tool(work)

    helper = flue.define_subagent("helper", "Does sub work.", agent=helper_fn, model=FunctionModel(child_answer))
    parent_model = FunctionModel(parent_answer)

    @flue.agent
    def parent():
        flue.use_model(parent_model)
        flue.use_subagent(helper)
    """
)
CHILD = """
import sys
sys.path.insert(0, sys.argv[2])
import flue_nb as flue
from durable_agents import parent
s = flue.init(parent, db=sys.argv[1], conversation="c")
print(s.dispatch("delegate it").submission_id, flush=True)
import time; time.sleep(600)
"""


def test_a_task_interrupted_by_a_crash_resumes_its_subagent_from_its_records(tmp_path, monkeypatch):
    (tmp_path / "durable_agents.py").write_text(AGENTS)
    db = str(tmp_path / "s.sqlite")
    env = {**__import__("os").environ, "FLUE_TEST_BLOCK": "1"}
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, db, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
    ) as child:
        try:
            sid = child.stdout.readline().strip()
            assert child.stdout.readline().strip() == "in work"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)

    monkeypatch.syspath_prepend(str(tmp_path))
    import durable_agents

    s = flue.init(durable_agents.parent, db=db, conversation="c", settings=RunSettings())
    assert s.read(sid, timeout=20).startswith("parent done: child done after Interrupted: the run stopped")
    # The subagent continued from its records: prompt, its `work` call, that call closed as unknown.
    assert durable_agents.CHILD_MODEL_CALLS == [["user", "assistant", "tool_result"]]
    history = s.history()
    task_result = next(m for m in history if isinstance(m, ToolResultMessage) and m.name == "task")
    assert not task_result.is_error and task_result.content.startswith("child done")
    assert "outcome is unknown" not in task_result.content
    # The subagent's messages are stored with the submission, like the parent's.
    steps = [r.data for r in s.store.records("c", kinds=["step"], submission_id=sid)]
    names = [d["name"] for d in steps if d["call_id"] == task_result.call_id]
    assert [n for n in names if n.startswith("message:")] == [f"message:{i:06d}" for i in range(4)]


def test_a_subagent_that_answered_before_the_crash_is_not_asked_again(tmp_path):
    import time

    from flue_nb.models import reply
    from flue_nb.runtime.messages import TextPart, ToolCall, message_to_dict
    from flue_nb.runtime.store import SubmissionState
    from flue_nb.runtime.store.sqlite import SQLiteStore

    child_model = FunctionModel(lambda request: reply("asked again"))

    @flue.agent
    def helper_fn():
        pass

    helper = flue.define_subagent("helper", "Helps.", agent=helper_fn, model=child_model)
    parent_model = FunctionModel(lambda request: reply("parent saw: " + request.messages[-1].content))

    @flue.agent
    def parent():
        flue.use_model(parent_model)
        flue.use_subagent(helper)

    # As a crash leaves it: the subagent answered (recorded) but the task's result was not.
    path = tmp_path / "s.sqlite"
    store = SQLiteStore(path)
    now = time.time()
    store.admit("c", "delegate", submission_id="sub_x", now=now - 5)
    store.acquire_lease("c", "gone-host:1:0", ttl=0.01)
    store.update_submission("sub_x", state=SubmissionState.RUNNING, attempts=1, started_at=now - 5)
    call = ToolCall("call_task", "task", {"prompt": "sub work", "agent": "helper"})
    store.append(
        "c",
        "sub_x",
        [
            ("message", message_to_dict(UserMessage("delegate", "sub_x"))),
            ("message", message_to_dict(AssistantMessage([call]))),
        ],
        now=now,
    )
    for i, m in enumerate([UserMessage("sub work"), AssistantMessage([TextPart("the child's answer")])]):
        store.append(
            "c",
            "sub_x",
            [("step", {"call_id": "call_task", "name": f"message:{i:06d}", "value": message_to_dict(m)})],
            now=now,
        )
    store.close()
    time.sleep(0.05)
    s = flue.init(parent, db=str(path), conversation="c", settings=RunSettings())
    assert s.read("sub_x", timeout=20) == "parent saw: the child's answer"
    assert child_model.requests == []


def test_a_subagents_events_are_rebuilt_from_the_store_as_they_were_seen_live(tmp_path):
    from flue_nb.models import reply, tool_call

    @flue.tool
    def look() -> str:
        """Look."""
        return "seen"

    child_model = FunctionModel(
        lambda request: (
            reply("child answer") if request.messages[-1].kind == "tool_result" else reply("", tool_call("look"))
        )
    )

    @flue.agent
    def helper_fn():
        flue.use_tool(look)

    helper = flue.define_subagent("helper", "Helps.", agent=helper_fn, model=child_model)
    parent_model = FunctionModel(
        lambda request: (
            reply("done")
            if request.messages[-1].kind == "tool_result"
            else reply("", tool_call("task", prompt="sub work", agent="helper", description="a sub task"))
        )
    )

    @flue.agent
    def parent():
        flue.use_model(parent_model)
        flue.use_subagent(helper)

    s = flue.init(parent, db=str(tmp_path / "s.sqlite"), conversation="c", settings=RunSettings())
    live: list = []
    s.observe(live.append)
    assert s.prompt("delegate", timeout=20) == "done"
    rebuilt = s.events()

    def task_view(events):
        # Logs are not records, and a streamed text comes back as one delta (replay.py).
        view = [
            (e.type, e.task_id is not None, getattr(e, "agent", None), getattr(e, "name", None))
            for e in events
            if (e.task_id is not None or e.type in ("task_start", "task")) and e.type != "log"
        ]
        return [v for i, v in enumerate(view) if not (v[0] == "text_delta" and i and view[i - 1][0] == "text_delta")]

    assert task_view(rebuilt) == task_view(live), (task_view(rebuilt), task_view(live))
    start = next(e for e in rebuilt if e.type == "task_start")
    assert (start.agent, start.description, start.depth) == ("helper", "a sub task", 1)
    end = next(e for e in rebuilt if e.type == "task")
    assert end.text == "child answer" and not end.is_error
