"""Tracing (issue 25): `flue.instrument()` turns the event union into GenAI spans and metrics."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb import CompactionConfig, define_subagent
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime import events as ev
from flue_nb.runtime import tracing

pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is in the test extra")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from flue_nb.runtime.tracing._spans import SpanObserver  # noqa: E402


class Exporter(InMemorySpanExporter):
    """The finished spans, after the tracer has handed over what it holds (it does so in batches)."""

    def get_finished_spans(self):  # type: ignore[no-untyped-def]
        tracing.flush()
        return super().get_finished_spans()


@pytest.fixture
def traced():
    exporter = Exporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])

    def start(content: bool = False) -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
        flue.instrument(tracer_provider=provider, meter_provider=meters, content=content)
        return exporter, reader

    yield start
    tracing._uninstrument()


def by_name(spans):
    return {s.name: s for s in spans}


@flue.tool
def ping(word: str) -> str:
    """Ping back the word."""
    return f"pong {word}"


def delegating_run():
    @flue.agent
    def child():
        return "You are the child."

    model = ScriptedModel(
        [
            reply("", tool_call("ping", word="secret-arg"), usage=(100, 10, 30, 5)),
            reply("", tool_call("task", prompt="look", agent="kid", description="look around")),
            reply("child answer"),
            reply("Parent done."),
        ]
    )
    sub = define_subagent("kid", "Looks", agent=child)
    return session(make_agent(model, tools=(ping,), extra=lambda: flue.use_subagent(sub)))


def test_tracing_a_run_with_a_tool_and_a_subagent_is_one_tree_of_genai_spans(traced):
    exporter, reader = traced()
    s = delegating_run()
    assert s.prompt("go") == "Parent done."
    spans = exporter.get_finished_spans()
    names = sorted(sp.name for sp in spans)
    assert names == sorted(
        [
            "invoke_agent test_agent",
            "chat scripted",
            "execute_tool ping",
            "chat scripted",
            "execute_tool task",
            "invoke_agent kid",
            "chat scripted",
            "chat scripted",
        ]
    )
    root = next(sp for sp in spans if sp.name == "invoke_agent test_agent")
    sid = s.submissions()[0].id
    assert root.parent is None
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "test_agent"
    assert root.attributes["gen_ai.conversation.id"] == s.conversation_id
    assert root.attributes["flue.submission.id"] == sid
    assert root.attributes["flue.submission.outcome"] == "completed"
    assert root.attributes["flue.submission.recovered"] is False
    assert tracing.trace_id(sid) == format(root.context.trace_id, "032x")
    assert {sp.context.trace_id for sp in spans} == {root.context.trace_id}

    ids = {sp.context.span_id: sp for sp in spans}
    parent_of = {sp.name + str(i): ids[sp.parent.span_id].name for i, sp in enumerate(spans) if sp.parent}
    tool = next(sp for sp in spans if sp.name == "execute_tool ping")
    assert ids[tool.parent.span_id] is root
    assert tool.attributes["gen_ai.tool.name"] == "ping" and tool.attributes["gen_ai.tool.call.id"]
    task_tool = next(sp for sp in spans if sp.name == "execute_tool task")
    kid = next(sp for sp in spans if sp.name == "invoke_agent kid")
    assert ids[kid.parent.span_id] is task_tool and ids[task_tool.parent.span_id] is root
    kid_chats = [sp for sp in spans if sp.name.startswith("chat") and ids[sp.parent.span_id] is kid]
    assert len(kid_chats) == 1, parent_of

    chat = min((sp for sp in spans if sp.name == "chat scripted"), key=lambda sp: sp.start_time)
    assert chat.kind is SpanKind.CLIENT and ids[chat.parent.span_id] is root
    a = chat.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "flue_nb"
    assert a["gen_ai.request.model"] == "scripted" and a["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (100, 10)
    assert a["gen_ai.usage.cache_read.input_tokens"] == 30 and a["gen_ai.usage.cache_creation.input_tokens"] == 5
    # Content is off by default: no prompt, answer, argument or result on any span.
    for sp in spans:
        for key in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments"):
            assert key not in sp.attributes
        assert "secret-arg" not in str(dict(sp.attributes))

    tracing.flush()
    metrics = {
        m.name: m for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    duration = metrics["gen_ai.client.operation.duration"].data.data_points
    assert sum(p.count for p in duration) == 4
    tokens = metrics["gen_ai.client.token.usage"].data.data_points
    assert {p.attributes["gen_ai.token.type"] for p in tokens} == {"input", "output"}


def test_tracing_content_when_on_is_redacted_and_cut_to_the_budget(traced, monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-very-secret-value-123")
    exporter, _ = traced(content=True)

    @flue.tool
    def leak() -> str:
        """Return a secret and a lot of text."""
        return "key sk-very-secret-value-123 " + "x" * 20_000

    model = ScriptedModel([reply("", tool_call("leak")), reply("done")])
    s = session(make_agent(model, tools=(leak,)))
    assert s.prompt("hello there") == "done"
    spans = by_name(exporter.get_finished_spans())
    result = spans["execute_tool leak"].attributes["gen_ai.tool.call.result"]
    assert "sk-very-secret-value-123" not in result and len(result) < 8_100 and "cut" in result
    assert spans["execute_tool leak"].attributes["gen_ai.tool.call.arguments"] == "{}"
    assert "hello there" in spans["invoke_agent test_agent"].attributes["gen_ai.input.messages"]
    assert "done" in spans["chat scripted"].attributes["gen_ai.output.messages"]


def test_tracing_a_compaction_is_a_span_with_its_reason(traced):
    exporter, _ = traced()
    model = ScriptedModel(
        [
            reply("word " * 60, tool_call("task", prompt="x", agent="none"), usage=(8_500, 100)),
            reply("after compaction"),
        ],
        summary="## Goal\nTest.\n## Progress\nSome.",
        context_window=10_000,
        max_output_tokens=2_000,
    )

    @flue.agent
    def compacting():
        flue.use_model(model, compaction=CompactionConfig(keep_recent_tokens=40))

    s = session(compacting)
    assert s.prompt("start " * 50) == "after compaction"
    spans = exporter.get_finished_spans()
    (comp,) = [sp for sp in spans if sp.name == "compaction threshold"]
    root = next(sp for sp in spans if sp.name == "invoke_agent compacting")
    assert comp.parent.span_id == root.context.span_id
    assert comp.attributes["flue.compaction.reason"] == "threshold"
    assert comp.attributes["flue.compaction.messages_before"] == 3


def test_tracing_a_failed_submission_ends_its_span_with_the_error(traced):
    exporter, _ = traced()
    s = session(make_agent(ScriptedModel([])))
    with pytest.raises(flue.FlueError):
        s.prompt("go")
    root = next(sp for sp in exporter.get_finished_spans() if sp.name.startswith("invoke_agent"))
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes["flue.submission.outcome"] == "failed" and root.attributes["error.type"]


RUN = (
    "import sys, flue_nb as flue\n"
    "from flue_nb.models import ScriptedModel\n"
    "@flue.agent\n"
    "def a():\n"
    "    flue.use_model(ScriptedModel(['hi']))\n"
    "print(flue.init(a, db=':memory:').prompt('hello'))\n"
    "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
)


def test_tracing_nothing_imports_opentelemetry_unless_asked():
    env = {k: v for k, v in os.environ.items() if k != "FLUE_OTEL"}
    off = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, env=env, check=True)
    assert off.stdout.split("\n")[:2] == ["hi", "[]"]
    on = subprocess.run(
        [sys.executable, "-c", RUN], capture_output=True, text=True, env={**env, "FLUE_OTEL": "1"}, check=True
    )
    assert "'opentelemetry.trace'" in on.stdout


def test_tracing_a_recovered_submission_has_no_spans_for_work_done_before_the_crash(traced, tmp_path):
    from test_recovery import CID, crashed_store

    from flue_nb.runtime.messages import AssistantMessage, TextPart, ToolCall, ToolResultMessage, UserMessage

    exporter, _ = traced()
    path = tmp_path / "s.sqlite"
    crashed_store(
        path,
        messages=[
            UserMessage("do it", "sub_crashed"),
            AssistantMessage([TextPart("Pinging."), ToolCall("c_done", "ping", {"word": "a"})]),
            ToolResultMessage("c_done", "ping", "pong a"),
        ],
        partial={"text": "The answer is", "thinking": ""},
    )
    s = session(make_agent(ScriptedModel([" forty-two."]), tools=(ping,)), db=str(path), conversation=CID)
    assert s.read("sub_crashed", timeout=20) == " forty-two."
    spans = exporter.get_finished_spans()
    # The done tool call and the kept half-streamed response are not traced again: one new call.
    assert sorted(sp.name for sp in spans) == ["chat scripted", "invoke_agent test_agent"]
    root = by_name(spans)["invoke_agent test_agent"]
    assert root.attributes["flue.submission.recovered"] is True
    assert root.attributes["flue.submission.crashed_attempts"] == 1
    assert root.attributes["flue.submission.outcome"] == "completed"


def fed(feed, content=False):
    """The spans a fresh tracer makes of these events (no session: the events alone)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = SpanObserver(provider.get_tracer("t"), MeterProvider().get_meter("t"), content=content)
    for e in feed:
        observer(e)
    observer.close()
    return exporter.get_finished_spans()


def test_tracing_a_task_already_answered_in_its_records_gets_no_span_again():
    # A recovering owner re-emits task_start/task for a subagent whose answer is recorded
    # (loop._run_task); no work is done again, so no span is made again.
    stamp = dict(conversation_id="c", submission_id="s")
    feed = [
        ev.SubmissionRunning(attempt=2, agent="parent", **stamp),
        ev.ToolStart(call_id="t1", name="task", **stamp),
        ev.TaskStart(agent="kid", task_id="t1", **stamp),
        ev.TaskEnd(agent="kid", text="recorded answer", task_id="t1", **stamp),
        ev.ToolEnd(call_id="t1", name="task", is_error=False, content="recorded answer", **stamp),
        ev.ToolStart(call_id="t2", name="task", **stamp),
        ev.TaskStart(agent="kid", task_id="t2", **stamp),
        ev.TurnStart(turn=1, model="m", provider="flue_nb", task_id="t2", **stamp),
        ev.TurnEnd(turn=1, task_id="t2", **stamp),
        ev.TaskEnd(agent="kid", text="new answer", task_id="t2", **stamp),
        ev.ToolEnd(call_id="t2", name="task", is_error=False, content="new answer", **stamp),
        ev.SubmissionSettled(outcome="completed", **stamp),
    ]
    spans = fed(feed)
    kids = [sp for sp in spans if sp.name == "invoke_agent kid"]
    assert len(kids) == 1 and kids[0].attributes["flue.task.id"] == "t2"
    chat = next(sp for sp in spans if sp.name == "chat m")
    assert chat.parent.span_id == kids[0].context.span_id


def test_tracing_each_kind_of_failure_marks_its_span_with_an_error_type_and_status():
    stamp = dict(conversation_id="c", submission_id="s")
    feed = [
        ev.SubmissionRunning(attempt=1, agent="parent", **stamp),
        ev.TurnStart(turn=1, model="m", provider="anthropic", **stamp),
        ev.TurnStart(turn=1, model="m", provider="anthropic", **stamp),  # the first try failed
        ev.TurnEnd(turn=1, stop_reason="tool_use", **stamp),
        ev.ToolStart(call_id="t1", name="boom", **stamp),
        ev.ToolEnd(call_id="t1", name="boom", is_error=True, content="Error: no", **stamp),
        ev.ToolStart(call_id="t2", name="task", **stamp),
        ev.TaskStart(agent="kid", task_id="t2", **stamp),
        ev.TaskEnd(agent="kid", text="", is_error=True, error="kid broke", task_id="t2", **stamp),
        ev.ToolEnd(call_id="t2", name="task", is_error=True, content="kid broke", ended="failed", **stamp),
        ev.CompactionStart(reason="overflow", estimated_tokens=9_000, **stamp),
        ev.CompactionEnd(
            reason="overflow", messages_before=5, messages_after=5, duration_ms=1, is_error=True, error="no", **stamp
        ),
        ev.TurnStart(turn=2, model="m", provider="anthropic", **stamp),
        ev.TurnEnd(turn=2, stop_reason="refusal", **stamp),
        ev.SubmissionSettled(outcome="completed", **stamp),
    ]
    spans = fed(feed)
    failed = {(sp.name, sp.attributes.get("error.type")) for sp in spans if sp.status.status_code is StatusCode.ERROR}
    assert failed == {
        ("chat m", "retried"),
        ("execute_tool boom", "tool_error"),
        ("invoke_agent kid", "task_failed"),
        ("execute_tool task", "failed"),
        ("compaction overflow", "compaction_failed"),
        ("chat m", "model_refused"),
    }
    ok = [sp for sp in spans if sp.status.status_code is not StatusCode.ERROR]
    assert sorted(sp.name for sp in ok) == ["chat m", "invoke_agent parent"]
    root = by_name(spans)["invoke_agent parent"]
    assert root.attributes["flue.submission.attempts"] == 1
    assert all(sp.context.trace_id == root.context.trace_id for sp in spans)
    kid = by_name(spans)["invoke_agent kid"]
    assert kid.parent.span_id == by_name(spans)["execute_tool task"].context.span_id


def test_tracing_hands_spans_over_in_batches_with_the_times_of_the_events():
    import time

    exporter = InMemorySpanExporter()  # the plain one: what the SDK has, without our flush
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = SpanObserver(provider.get_tracer("t"), MeterProvider().get_meter("t"), delay=0.05)
    stamp = dict(conversation_id="c", submission_id="s")
    before = time.time_ns()
    observer(ev.SubmissionRunning(attempt=1, agent="a", **stamp))
    observer(ev.ToolStart(call_id="t1", name="slow", **stamp))
    time.sleep(0.2)
    observer(ev.ToolEnd(call_id="t1", name="slow", is_error=False, content="ok", **stamp))
    observer(ev.SubmissionSettled(outcome="completed", **stamp))
    handed = time.time_ns()
    for _ in range(200):  # the tracer's thread hands them over on its own, within its delay
        if len(exporter.get_finished_spans()) == 2:
            break
        time.sleep(0.01)
    tool, root = sorted(exporter.get_finished_spans(), key=lambda sp: sp.name)
    assert (tool.name, root.name) == ("execute_tool slow", "invoke_agent a")
    # The spans carry when things happened, not when they were handed over.
    assert before <= root.start_time <= tool.start_time < tool.end_time <= root.end_time <= handed
    assert tool.end_time - tool.start_time >= 0.2e9
    observer.close()


def test_tracing_hands_the_last_spans_over_when_the_process_exits():
    code = (
        "import flue_nb as flue\n"
        "from flue_nb.models import ScriptedModel\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor, ConsoleSpanExporter\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))\n"
        "flue.instrument(tracer_provider=provider)\n"
        "@flue.agent\n"
        "def exiting():\n"
        "    flue.use_model(ScriptedModel(['bye']))\n"
        "print(flue.init(exiting, db=':memory:').prompt('hello'))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.startswith("bye\n"), run.stdout
    assert '"name": "invoke_agent exiting"' in run.stdout and '"name": "chat scripted"' in run.stdout, run.stdout


def test_tracing_a_forked_child_does_not_hand_over_its_parents_waiting_spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = SpanObserver(provider.get_tracer("t"), MeterProvider().get_meter("t"), delay=3600)
    stamp = dict(conversation_id="c", submission_id="s")
    observer(ev.SubmissionRunning(attempt=1, agent="a", **stamp))
    observer(ev.SubmissionSettled(outcome="completed", **stamp))
    pid = os.fork()
    if pid == 0:  # the child: its tracer starts empty and works
        code = 0
        try:
            observer.flush()
            child = dict(conversation_id="c", submission_id="child")
            observer(ev.SubmissionRunning(attempt=1, agent="kid", **child))
            observer(ev.SubmissionSettled(outcome="completed", **child))
            observer.flush()
            names = [sp.name for sp in exporter.get_finished_spans()]
            code = 0 if names == ["invoke_agent kid"] else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    observer.flush()
    assert [sp.name for sp in exporter.get_finished_spans()] == ["invoke_agent a"]


def test_tracing_keeps_the_trace_ids_of_the_latest_submissions_only(monkeypatch):
    from flue_nb.runtime.tracing import _spans

    monkeypatch.setattr(_spans, "KEPT_TRACE_IDS", 3)
    provider = TracerProvider()
    observer = SpanObserver(provider.get_tracer("t"), MeterProvider().get_meter("t"), delay=3600)
    for n in range(5):
        stamp = dict(conversation_id="c", submission_id=f"s{n}")
        observer(ev.SubmissionRunning(attempt=1, agent="a", **stamp))
        observer(ev.SubmissionSettled(outcome="completed", **stamp))
    assert [observer.trace_id(f"s{n}") is not None for n in range(5)] == [False, False, True, True, True]
    observer.close()


def test_tracing_with_content_off_carries_no_content_in_statuses():
    # Issue 32.4: status descriptions carried a provider error quoting the prompt, and a failed
    # subagent's error quoting its task prompt; with content off errors are described by code.
    said = "my private plan for Tuesday"
    stamp = dict(conversation_id="c", submission_id="s")
    feed = [
        ev.SubmissionQueued(text=said, accepted_at=1.0, **stamp),
        ev.SubmissionRunning(attempt=1, agent="parent", **stamp),
        ev.ToolStart(call_id="t2", name="task", input={"prompt": said}, **stamp),
        ev.TaskStart(agent="kid", task_id="t2", description=said, **stamp),
        ev.TaskEnd(agent="kid", is_error=True, error=f"provider said: bad prompt {said!r}", task_id="t2", **stamp),
        ev.ToolEnd(call_id="t2", name="task", is_error=True, content=said, ended="failed", **stamp),
        ev.CompactionStart(reason="overflow", estimated_tokens=9_000, **stamp),
        ev.CompactionEnd(
            reason="overflow", messages_before=5, messages_after=5, duration_ms=1, is_error=True,
            error=f"summary failed on {said}", **stamp,
        ),
        ev.SubmissionSettled(
            outcome="failed", error=ev.ErrorInfo("provider_error", f"400: messages.0: {said}"), **stamp
        ),
    ]  # fmt: skip

    def everything(spans) -> str:
        parts = []
        for sp in spans:
            parts += [sp.name, str(sp.status.description), repr(dict(sp.attributes or {}))]
            parts += [repr((e.name, dict(e.attributes or {}))) for e in sp.events]
        return "\n".join(parts)

    spans = fed(feed)
    assert len([sp for sp in spans if sp.status.status_code is StatusCode.ERROR]) == 4
    assert said not in everything(spans)
    statuses = {sp.name: sp.status.description for sp in spans}
    assert statuses["invoke_agent parent"] == "provider_error"
    assert statuses["invoke_agent kid"] == "task_failed"
    assert statuses["compaction overflow"] == "compaction_failed"
    assert said in everything(fed(feed, content=True))  # content on: the messages say what happened
