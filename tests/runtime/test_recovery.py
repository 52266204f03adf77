"""Recovery from what the store proves (contract 11.2), on stores seeded as a crash leaves them."""

from __future__ import annotations

import time

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import ScriptedModel
from flue_nb.runtime.messages import (
    AssistantMessage,
    SignalMessage,
    TextPart,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    message_to_dict,
)
from flue_nb.runtime.store import Outcome, SubmissionState
from flue_nb.runtime.store.sqlite import SQLiteStore

CID = "crashed"


def crashed_store(path, text="do it", messages=(), partial=None, abort=False):
    """A store as a killed process leaves it: a running submission whose owner's lease expired."""
    store = SQLiteStore(path)
    now = time.time()
    store.ensure_conversation(CID, now=now)
    sub = store.admit(CID, text, submission_id="sub_crashed", now=now - 5)
    store.acquire_lease(CID, "dead-owner", ttl=1)
    store.update_submission(
        sub.id,
        state=SubmissionState.RUNNING,
        attempts=1,
        started_at=now - 5,
        lease_owner="dead-owner",
        lease_expires=now - 9,
    )
    if messages:
        store.append(CID, sub.id, [("message", message_to_dict(m)) for m in messages], now=now - 4)
    if partial:
        store.put_partial(sub.id, partial)
    if abort:
        store.request_abort(CID)
    store.close()
    return sub.id


def recover(path, model, **kw):
    s = session(make_agent(model, **kw), db=str(path), conversation=CID)
    return s, s.read("sub_crashed", timeout=20)


def test_recovery_11_2_input_never_stored_is_requeued_and_runs(tmp_path):
    path = tmp_path / "s.sqlite"
    crashed_store(path)
    model = ScriptedModel(["fresh answer"])
    s, answer = recover(path, model)
    assert answer == "fresh answer"
    assert [m.text for m in model.requests[0].messages] == ["do it"]
    assert s.submissions()[0].attempts == 2


def test_recovery_11_2_a_completed_response_settles_completed_without_a_model_call(tmp_path):
    path = tmp_path / "s.sqlite"
    crashed_store(path, messages=[UserMessage("do it", "sub_crashed"), AssistantMessage([TextPart("already done")])])
    model = ScriptedModel([])
    s, answer = recover(path, model)
    assert answer == "already done" and model.requests == []
    assert len(s.store.records(CID, kinds=["settlement"])) == 1


def test_recovery_11_2_a_half_streamed_message_is_kept_as_aborted_and_the_model_continues(tmp_path):
    path = tmp_path / "s.sqlite"
    crashed_store(
        path, messages=[UserMessage("do it", "sub_crashed")], partial={"text": "The answer is", "thinking": ""}
    )
    model = ScriptedModel([" forty-two."])
    s, answer = recover(path, model)
    assert answer == " forty-two."
    msgs = model.requests[0].messages
    assert isinstance(msgs[1], AssistantMessage) and msgs[1].aborted and msgs[1].text == "The answer is"
    assert isinstance(msgs[2], SignalMessage) and msgs[2].signal_type == "interrupted"
    assert s.store.partial("sub_crashed") is None


def test_recovery_11_2_unresolved_calls_get_an_unknown_outcome_result_and_are_not_rerun(tmp_path):
    path = tmp_path / "s.sqlite"
    ran = []

    @flue.tool
    def deploy(target: str) -> str:
        """Deploy."""
        ran.append(target)
        return "deployed"

    calls = [ToolCall("c_done", "deploy", {"target": "a"}), ToolCall("c_lost", "deploy", {"target": "b"})]
    crashed_store(
        path,
        messages=[
            UserMessage("do it", "sub_crashed"),
            AssistantMessage([TextPart("Deploying."), *calls]),
            ToolResultMessage("c_done", "deploy", "deployed"),
        ],
    )
    model = ScriptedModel(["checked"])
    s, answer = recover(path, model, tools=(deploy,))
    assert answer == "checked" and ran == []
    results = [m for m in model.requests[0].messages if isinstance(m, ToolResultMessage)]
    assert [(r.call_id, r.is_error) for r in results] == [("c_done", False), ("c_lost", True)]
    assert "outcome is unknown" in results[1].content


def test_recovery_11_2_durable_tools_rerun_with_recorded_steps_replayed(tmp_path):
    path = tmp_path / "s.sqlite"
    performed = []

    @flue.tool(durable=True)
    async def migrate(ctx: flue.ToolContext) -> str:
        """Two-step migration."""
        a = await ctx.step.do("backup", lambda: performed.append("backup") or "backup-1")
        b = await ctx.step.do("apply", lambda: performed.append("apply") or "applied")
        return f"{a} {b}"

    crashed_store(
        path, messages=[UserMessage("do it", "sub_crashed"), AssistantMessage([ToolCall("c_mig", "migrate", {})])]
    )
    store = SQLiteStore(path)
    store.append(
        CID, "sub_crashed", [("step", {"call_id": "c_mig", "name": "backup", "value": "backup-1"})], now=time.time()
    )
    store.close()
    model = ScriptedModel(["migrated"])
    _, answer = recover(path, model, tools=(migrate,))
    assert answer == "migrated"
    assert performed == ["apply"]  # the recorded step was replayed, not run again
    result = model.requests[0].messages[-1]
    assert result.content == "backup-1 applied" and not result.is_error


def test_recovery_11_2_an_abort_intent_settles_aborted_without_model_work(tmp_path):
    path = tmp_path / "s.sqlite"
    crashed_store(path, messages=[UserMessage("do it", "sub_crashed")], abort=True)
    model = ScriptedModel([])
    s = session(make_agent(model), db=str(path), conversation=CID)
    with pytest.raises(flue.SubmissionAbortedError):
        s.read("sub_crashed", timeout=20)
    assert model.requests == [] and s.submissions()[0].outcome == Outcome.ABORTED


def test_recovery_emits_a_submission_recovery_event(tmp_path):
    path = tmp_path / "s.sqlite"
    crashed_store(path)
    model = ScriptedModel(["ok"])
    s = session(make_agent(model), db=str(path), conversation=CID)
    events = []
    s.observe(events.append)
    s.read("sub_crashed", timeout=20)
    rec = [e for e in events if e.type == "submission_recovery"]
    assert len(rec) == 1 and rec[0].submission_id == "sub_crashed"


def test_recovery_11_1_a_live_lease_of_another_owner_is_respected_until_it_expires(tmp_path):
    path = tmp_path / "s.sqlite"
    crashed_store(path)
    store = SQLiteStore(path)
    store.acquire_lease(CID, "other-owner", ttl=1.5)
    store.close()
    model = ScriptedModel(["after the lease"])
    s = session(make_agent(model), db=str(path), conversation=CID)
    started = time.time()
    assert s.read("sub_crashed", timeout=20) == "after the lease"
    assert time.time() - started >= 1.0


def test_recovery_11_1_opening_a_session_recovers_without_new_work(tmp_path):
    path = tmp_path / "s.sqlite"
    crashed_store(
        path, messages=[UserMessage("do it", "sub_crashed"), AssistantMessage([TextPart("done before the crash")])]
    )
    s = session(make_agent(ScriptedModel([])), db=str(path), conversation=CID)
    deadline = time.time() + 10
    while s.store.submission("sub_crashed").state != SubmissionState.SETTLED:
        assert time.time() < deadline, "opening the session did not recover the crashed submission"
        time.sleep(0.05)
    assert s.store.submission("sub_crashed").result == "done before the crash"
