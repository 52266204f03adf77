"""Submissions: admission, the queue, joins, outcomes, retries, timeouts, abort (contract 10, 11)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from agents import Sleeps, make_agent, session, wait_for_event

import flue_nb as flue
from flue_nb.models import FunctionModel, ScriptedModel, fail, reply, tool_call
from flue_nb.runtime.messages import ToolResultMessage, UserMessage
from flue_nb.runtime.store import Outcome, SubmissionState


def test_submissions_10_1_admission_commits_before_any_model_work():
    states = []

    def model_fn(request):
        (sub,) = s.submissions()
        states.append((sub.state, sub.accepted_at is not None))
        return reply("ok")

    s = session(make_agent(FunctionModel(model_fn)))
    receipt = s.dispatch("hello")
    assert receipt.submission_id and receipt.accepted_at > 0
    assert s.store.submission(receipt.submission_id) is not None
    assert s.read(receipt) == "ok"
    assert states == [(SubmissionState.RUNNING, True)]


def test_submissions_10_2_one_runs_at_a_time_in_admission_order():
    model = ScriptedModel(["first answer", "second answer", "third answer"], delay=0.01)
    s = session(make_agent(model))
    receipts = [s.dispatch(t) for t in ("one", "two", "three")]
    assert [s.read(r) for r in receipts] == ["first answer", "second answer", "third answer"]
    # Final answers have no turn boundary to join at: each ran as its own submission, in order.
    lasts = [r.messages[-1].text for r in model.requests]
    assert lasts == ["one", "two", "three"]
    subs = s.submissions()
    assert [x.seq for x in subs] == sorted(x.seq for x in subs)
    assert all(x.joined_into is None for x in subs)


def test_submissions_10_3_a_message_during_a_tool_joins_the_next_model_request():
    gate = threading.Event()

    @flue.tool
    def slow() -> str:
        """Wait for the gate."""
        gate.wait(10)
        return "opened"

    model = ScriptedModel([reply("", tool_call("slow")), reply("handled both")])
    s = session(make_agent(model, tools=(slow,)))
    tool_started = wait_for_event(s, "tool_start")
    first = s.dispatch("first")
    tool_started()
    second = s.dispatch("also this")
    assert s.store.submission(second.submission_id).state == SubmissionState.JOINING
    gate.set()
    assert s.read(first) == "handled both"
    assert s.read(second) == "handled both"
    msgs = model.requests[1].messages
    assert isinstance(msgs[-2], ToolResultMessage) and isinstance(msgs[-1], UserMessage)
    assert msgs[-1].text == "also this"
    joined = s.store.submission(second.submission_id)
    assert joined.joined_into == first.submission_id and joined.outcome == Outcome.COMPLETED
    (own,) = s.store.records(s.conversation_id, kinds=["settlement"], submission_id=second.submission_id)
    assert own.data["joined_into"] == first.submission_id
    assert len(model.requests) == 2


def test_submissions_10_3_a_message_that_misses_the_live_response_runs_on_its_own():
    model = ScriptedModel(["a long final answer " * 5, "second"], delay=0.01)
    s = session(make_agent(model))
    streaming = wait_for_event(s, "text_delta")
    first = s.dispatch("first")
    streaming()
    second = s.dispatch("second message")
    assert s.read(first).startswith("a long final answer")
    assert s.read(second) == "second"
    sub = s.store.submission(second.submission_id)
    assert sub.joined_into is None and sub.outcome == Outcome.COMPLETED
    assert model.requests[1].messages[-1].text == "second message"


def test_submissions_10_4_every_submission_settles_exactly_once_with_a_settlement_record():
    model = ScriptedModel(["a", fail("bad_request", "nope"), "c"])
    s = session(make_agent(model))
    r = [s.dispatch(x) for x in ("1", "2", "3")]
    assert s.read(r[0]) == "a"
    with pytest.raises(flue.ProviderError, match="nope"):
        s.read(r[1])
    assert s.read(r[2]) == "c"
    settlements = s.store.records(s.conversation_id, kinds=["settlement"])
    assert sorted(rec.submission_id for rec in settlements) == sorted(x.submission_id for x in r)
    assert [x.outcome for x in s.submissions()] == [Outcome.COMPLETED, Outcome.FAILED, Outcome.COMPLETED]


def test_submissions_10_5_states_go_queued_running_settled():
    seen = []
    s = session(make_agent(ScriptedModel(["ok"])))
    s.observe(lambda e: seen.append(e.type) if e.type.startswith("submission_") else None)
    s.prompt("hi")
    assert seen == ["submission_queued", "submission_running", "submission_settled"]


def test_retry_11_3_transient_errors_back_off_exponentially_with_jitter():
    sleeps = Sleeps()
    model = ScriptedModel(
        [fail("overloaded"), fail("rate_limit", status=429), fail("server", status=500), reply("finally")]
    )
    s = session(make_agent(model), sleeps=sleeps)
    assert s.prompt("hi") == "finally"
    assert len(sleeps.delays) == 3
    for delay, base in zip(sleeps.delays, (2, 4, 8)):
        assert 0.8 * base <= delay <= 1.2 * base
    assert s.submissions()[0].attempts == 1


def test_retry_11_3_four_in_a_row_fail_the_attempt_and_the_next_attempt_continues():
    model = ScriptedModel([fail("overloaded")] * 4 + ["second attempt worked"])
    s = session(make_agent(model, max_attempts=2))
    assert s.prompt("hi") == "second attempt worked"
    assert s.submissions()[0].attempts == 2


def test_retry_11_4_exhausted_attempts_settle_failed_with_a_structured_error():
    model = ScriptedModel([fail("overloaded")] * 8)
    s = session(make_agent(model, max_attempts=2))
    with pytest.raises(flue.SubmissionRetryExhaustedError) as exc_info:
        s.prompt("hi")
    err = exc_info.value
    assert err.type == "submission_retry_exhausted" and "2 attempts" in err.message
    stored = s.submissions()[0].error
    assert stored["type"] == "submission_retry_exhausted" and "Traceback" not in str(stored)
    assert stored["details"]["last_error"]["details"]["kind"] == "overloaded"


def test_retry_non_transient_provider_errors_fail_without_retrying():
    sleeps = Sleeps()
    model = ScriptedModel([fail("auth", "invalid x-api-key", status=401)])
    s = session(make_agent(model), sleeps=sleeps)
    with pytest.raises(flue.ProviderHTTPError, match="invalid x-api-key"):
        s.prompt("hi")
    assert sleeps.delays == [] and s.submissions()[0].attempts == 1


def test_timeout_11_4_a_submission_past_its_timeout_fails_naming_the_unknown_tool_calls():
    import asyncio

    @flue.tool
    async def forever() -> str:
        """Never returns."""
        await asyncio.sleep(60)
        return "never"

    model = ScriptedModel([reply("", tool_call("forever", "call_forever"))])
    s = session(make_agent(model, tools=(forever,), timeout=0.5))
    with pytest.raises(flue.SubmissionTimeoutError) as exc_info:
        s.prompt("hi")
    assert "forever (call_forever)" in exc_info.value.message
    assert exc_info.value.details["unknown_tool_calls"] == [{"id": "call_forever", "name": "forever"}]
    # The history stays well-formed: the dangling call got a result.
    assert isinstance(s.history()[-1], ToolResultMessage)


def test_abort_11_5_settles_the_live_and_queued_submissions_aborted_and_kills_the_command(tmp_path):
    marker = f"sleep 31.{int(time.time() * 1000) % 100000}"
    model = ScriptedModel([reply("done first"), reply("", tool_call("bash", command=marker))])
    s = session(make_agent(model, sandbox=flue.local(str(tmp_path))))
    done = s.prompt("first")
    tool_started = wait_for_event(s, "tool_start")
    live = s.dispatch("run the long command")
    tool_started()
    queued = s.dispatch("and this")
    time.sleep(0.3)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0
    aborted = s.abort()
    assert set(aborted) == {live.submission_id, queued.submission_id}
    for r in (live, queued):
        with pytest.raises(flue.SubmissionAbortedError):
            s.read(r, timeout=10)
    time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1
    outcomes = {x.text: x.outcome for x in s.submissions()}
    assert outcomes == {
        "first": Outcome.COMPLETED,
        "run the long command": Outcome.ABORTED,
        "and this": Outcome.ABORTED,
    }
    assert done == "done first"
    # The conversation is ready for more work afterwards.
    model.steps.append(reply("still here"))
    assert s.prompt("again") == "still here"
    last = model.requests[-1].messages
    aborted_result = next(m for m in last if isinstance(m, ToolResultMessage))
    assert aborted_result.is_error and "Aborted" in aborted_result.content
    assert last[-1].text == "again"


def test_state_11_6_persistent_state_survives_a_new_process(tmp_path):
    db = tmp_path / "state.sqlite"

    @flue.tool
    def remember(value: str) -> str:
        """Remember a value."""
        setter["set"](value)
        return "ok"

    setter = {}

    def state():
        _, setter["set"] = flue.use_persistent_state("memo", None)

    model = ScriptedModel([reply("", tool_call("remember", value="blue")), reply("stored")])
    session(make_agent(model, tools=(remember,), extra=state), db=str(db), conversation="c").prompt("remember blue")
    code = (
        "from flue_nb.runtime.store.sqlite import SQLiteStore;"
        f"s = SQLiteStore({str(db)!r}); print(s.state('c')['memo']); s.close()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "blue"


def test_state_11_6_a_state_write_commits_in_the_same_record_batch_as_its_tool_results(tmp_path):
    setter = {}

    @flue.tool
    def remember() -> str:
        """Remember."""
        setter["set"](42)
        return "ok"

    def state():
        _, setter["set"] = flue.use_persistent_state("n", 0)

    model = ScriptedModel([reply("", tool_call("remember")), reply("done")])
    s = session(make_agent(model, tools=(remember,), extra=state))
    s.prompt("go")
    recs = s.store.records(s.conversation_id)
    result = next(r for r in recs if r.kind == "message" and r.data["kind"] == "tool_result")
    write = next(r for r in recs if r.kind == "state")
    assert write.seq == result.seq + 1 and write.created_at == result.created_at


def test_reinit_with_a_redefined_agent_shares_one_worker_per_conversation(tmp_path):
    db = str(tmp_path / "one.sqlite")
    first = ScriptedModel(["from the first definition"])
    second = ScriptedModel(["from the redefinition"])
    s1 = flue.init(make_agent(first), db=db, conversation="shared")
    assert s1.prompt("a") == "from the first definition"
    s2 = flue.init(make_agent(second), db=db, conversation="shared")
    assert s2.prompt("b") == "from the redefinition"
    assert len(s1.history()) == 4


def test_abort_11_5_a_tool_interrupted_by_the_user_stops_the_run_instead_of_continuing():
    @flue.tool
    def user_code() -> str:
        """Stands for the python tool's user code hit by Ctrl-C on the kernel's main thread."""
        raise flue.SubmissionAbortedError("interrupted by the user while a tool ran")

    model = ScriptedModel([reply("", tool_call("user_code")), reply("must not be asked")])
    s = session(make_agent(model, tools=(user_code,)))
    events = []
    s.observe(events.append)
    with pytest.raises(flue.SubmissionAbortedError):
        s.prompt("run it")
    assert model.remaining == 1  # the run did not go on to the next model call
    assert s.submissions()[0].outcome == Outcome.ABORTED
    (end,) = [e for e in events if e.type == "tool"]
    assert end.is_error and end.ended == "aborted"
