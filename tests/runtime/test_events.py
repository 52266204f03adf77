"""Events (contract 15) and errors (contract 16)."""

from __future__ import annotations

import flue_nb as flue
from agents import make_agent, session
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime import errors
from flue_nb.runtime.events import EventType
from typing import get_args


def run_with_events(model, **kw):
    s = session(make_agent(model, **kw))
    events = []
    s.observe(events.append)
    s.prompt("go")
    return s, events


def test_events_15_1_every_event_has_the_common_fields_and_a_monotonic_index():
    @flue.tool
    def ping() -> str:
        """Ping."""
        return "pong"

    s, events = run_with_events(ScriptedModel([reply("calling", tool_call("ping")), reply("done")]), tools=(ping,))
    assert [e.event_index for e in events] == list(range(events[0].event_index, events[0].event_index + len(events)))
    for e in events:
        assert e.conversation_id == s.conversation_id and e.timestamp > 0
    sub_id = s.submissions()[0].id
    assert all(e.submission_id == sub_id for e in events if e.type != "idle")
    assert {e.turn_id for e in events if e.type in ("text_delta", "message_start", "message_end")} == {"t1", "t2"}


def test_events_15_2_a_tool_run_emits_the_documented_sequence():
    @flue.tool
    def ping() -> str:
        """Ping."""
        return "pong"

    _, events = run_with_events(ScriptedModel([reply("calling", tool_call("ping")), reply("done")]), tools=(ping,))
    types = [e.type for e in events if e.type not in ("text_delta", "log")]
    assert types == [
        "submission_queued", "submission_running", "agent_start",
        "turn_start", "message_start", "message_end", "turn",
        "tool_start", "tool",
        "turn_start", "message_start", "message_end", "turn",
        "agent_end", "submission_settled", "idle",
    ]
    tool_event = next(e for e in events if e.type == "tool")
    assert tool_event.name == "ping" and tool_event.is_error is False
    assert tool_event.content == "pong" and tool_event.duration_ms >= 0
    deltas = "".join(e.delta for e in events if e.type == "text_delta")
    assert deltas == "callingdone"
    assert set(types) <= set(get_args(EventType))


def test_events_15_3_the_history_is_rebuilt_from_the_store(tmp_path):
    db = str(tmp_path / "h.sqlite")
    model = ScriptedModel([reply("", tool_call("glob", pattern="*.txt")), reply("none found"), reply("second")])
    agent = make_agent(model, sandbox=flue.local(str(tmp_path)))
    s = session(agent, db=db, conversation="h")
    s.prompt("find text files")
    s.prompt("again")
    reopened = session(agent, db=db, conversation="h")
    history = reopened.history()
    assert [m.kind for m in history] == ["user", "assistant", "tool_result", "assistant", "user", "assistant"]
    assert history == s.history()


def test_events_a_broken_observer_does_not_break_the_run():
    s = session(make_agent(ScriptedModel(["fine"])))
    s.observe(lambda e: 1 / 0)
    assert s.prompt("hi") == "fine"


def test_events_stream_yields_a_runs_events_until_it_settles():
    s = session(make_agent(ScriptedModel(["streamed answer"])))
    types = [e.type for e in s.stream("hi")]
    assert types[0] == "submission_queued" and types[-1] == "submission_settled"
    assert "text_delta" in types


def test_errors_16_1_every_contract_error_type_is_a_flue_error_with_its_code():
    codes = {
        "tool_name_conflict": errors.ToolNameConflictError,
        "delegation_depth_exceeded": errors.DelegationDepthExceededError,
        "session_busy": errors.SessionBusyError,
        "no_sandbox": errors.NoSandboxError,
        "model_not_configured": errors.ModelNotConfiguredError,
        "submission_aborted": errors.SubmissionAbortedError,
        "submission_timeout": errors.SubmissionTimeoutError,
        "submission_retry_exhausted": errors.SubmissionRetryExhaustedError,
        "tool_input_validation": errors.ToolInputValidationError,
    }
    for code, cls in codes.items():
        assert cls.type == code and issubclass(cls, errors.FlueError)
        err = cls("something a person can act on")
        assert errors.error_from_dict(err.to_dict()).__class__ is cls


def test_errors_16_1_config_errors_and_run_errors_are_separate_branches():
    assert issubclass(errors.ModelNotConfiguredError, errors.ConfigError)
    assert issubclass(errors.ProviderHTTPError, errors.ProviderError)
    assert issubclass(errors.ProviderError, errors.RunError)
    assert not issubclass(errors.RunError, errors.ConfigError)
    assert errors.ProviderError("x", kind="overloaded").transient
    assert not errors.ProviderError("x", kind="auth").transient


def test_errors_16_1_a_stored_settlement_error_keeps_type_and_message_and_no_traceback():
    @flue.tool
    def bad() -> str:
        """Raises a config error."""
        raise flue.ConfigError("the tool is misconfigured: set `x`")

    s2 = session(make_agent(ScriptedModel([reply("", tool_call("bad"))]), tools=(bad,)))
    try:
        s2.prompt("go")
    except flue.ConfigError:
        pass
    stored = s2.submissions()[0].error
    assert stored == {"type": "config_error", "message": "the tool is misconfigured: set `x`"}
