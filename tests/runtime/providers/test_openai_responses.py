"""The OpenAI Responses API provider (issue 38, point 4), on the real `openai` SDK against a loopback
server that replays real Responses streams recorded by pydantic-ai's and vercel/ai's test suites
(tests/data/openai-responses/, sources in its README).

Each recording is also read by a small reference reader of its finished output items, its
deltas and its final usage (the API's documented events), and the provider's message must agree
with it. Then:
text streaming, reasoning items sent back encrypted and unchanged with the function calls and
their outputs, usage with cached and reasoning tokens in the status, and the runtime's retries,
timeouts, budgets and tracing on this provider. The contract tests of `test_provider_agent.py`
and `test_provider_faults.py` run on it too (the `wire` fixture).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import flue_nb as flue
from flue_nb.runtime import tracing
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.errors import ContextOverflowError, ProviderError, ProviderHTTPError
from flue_nb.runtime.messages import (
    AssistantMessage,
    ProviderPart,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    Usage,
    UserMessage,
    message_from_dict,
    message_to_dict,
)
from flue_nb.runtime.providers import price_of, resolve_model, split_spec
from flue_nb.runtime.providers._responses_wire import to_responses_input
from flue_nb.runtime.providers.model import ModelRequest, ResponseDone, TextChunk, ThinkingChunk, ToolCallDelta
from flue_nb.runtime.providers.openai import OpenAIModel
from flue_nb.runtime.providers.openai_responses import OpenAIResponsesModel
from flue_nb.runtime.session import open_conversation
from tests.openai_responses_server import (
    RECORDED,
    ResponsesServer,
    function_call,
    reasoning,
    recorded,
    response,
    text,
)
from tests.openai_server import OpenAIServer, error
from tests.provider_wires import READ, Sleeps
from tests.provider_wires import collect as run

STREAMS = sorted(p.stem for p in RECORDED.glob("*.sse"))
ANSWERS = [s for s in STREAMS if s != "vercel-error"]
CALCULATION = [f"vercel-reasoning-encrypted-content-{n}" for n in (1, 2, 3, 4)]


def model_on(server: ResponsesServer, name: str = "gpt-5", **kwargs: Any) -> OpenAIResponsesModel:
    kwargs.setdefault("context_window", 128_000)
    return OpenAIResponsesModel(name, base_url=server.base_url, api_key="test-key", **kwargs)


def done(events: list[Any]) -> AssistantMessage:
    assert isinstance(events[-1], ResponseDone), events
    return events[-1].message


def final_response(name: str) -> dict[str, Any]:
    """The response a recording ends with (`response.completed`, `.incomplete` or `.failed`)."""
    return next(e["response"] for e in reversed(recorded(name).dicts) if e["type"].startswith("response."))


def output_items(name: str) -> list[dict[str, Any]]:
    """The finished items of a recording, in output order."""
    items = {e["output_index"]: e["item"] for e in recorded(name).dicts if e["type"] == "response.output_item.done"}
    return [items[k] for k in sorted(items)]


def _reference(name: str) -> dict[str, Any]:
    """What a recorded response said, by the API's documented events (independent of flue_nb):
    its finished output items, the deltas that streamed, and the final usage."""
    out = output_items(name)
    events = recorded(name).dicts
    thinking = []
    for item in (i for i in out if i["type"] == "reasoning"):
        summary = [s["text"] for s in item.get("summary") or []]
        thinking.append("\n\n".join(summary) or "".join(c["text"] for c in item.get("content") or []))
    usage = final_response(name)["usage"]
    cached = usage["input_tokens_details"]["cached_tokens"]
    return {
        "text": "".join(
            c["text"] for i in out if i["type"] == "message" for c in i["content"] if c["type"] == "output_text"
        ),
        "streamed": "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta"),
        "calls": [(i["call_id"], i["name"], json.loads(i["arguments"])) for i in out if i["type"] == "function_call"],
        "reasoning": [i for i in out if i["type"] == "reasoning"],
        "thinking": [t for t in thinking if t],
        "usage": Usage(
            usage["input_tokens"] - cached,
            usage["output_tokens"],
            cached,
            0,
            usage["output_tokens_details"]["reasoning_tokens"],
        ),
    }


# --- every recording ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ANSWERS)
def test_each_recorded_stream_becomes_the_response_it_describes(responses_server: ResponsesServer, name: str) -> None:
    responses_server.enqueue(recorded(name))
    events, exc = run(model_on(responses_server))
    assert exc is None, exc
    message, want = done(events), _reference(name)
    assert message.text == want["text"]
    # Streamed as it came (vercel trimmed most deltas out of `vercel-phase`; elsewhere they add up).
    assert "".join(e.text for e in events if isinstance(e, TextChunk)) == want["streamed"]
    assert name == "vercel-phase" or want["streamed"] == want["text"]
    assert [(c.id, c.name, c.input) for c in message.tool_calls] == want["calls"]
    assert [e.id for e in events if isinstance(e, ToolCallDelta)] == [c[0] for c in want["calls"]]
    # Reasoning items are kept as the stream finished them, encrypted content and all (OpenAI
    # encrypts afresh each time it writes one: `response.completed` holds other ciphertexts of
    # the same items; the `output_item.done` ones are those pydantic-ai sent back and OpenAI took).
    kept = [p.block for p in message.parts if isinstance(p, ProviderPart) and p.block_type == "reasoning"]
    assert kept == want["reasoning"]
    assert [p.thinking for p in message.parts if isinstance(p, ThinkingPart)] == want["thinking"]
    assert message.usage == want["usage"]
    assert message.stop_reason == ("tool_use" if want["calls"] else "end_turn")
    assert message.model == f"127.0.0.1/{final_response(name)['model']}"


def test_an_error_event_for_an_empty_quota_is_a_final_error() -> None:
    with ResponsesServer() as server:
        server.enqueue(recorded("vercel-error"))
        events, exc = run(model_on(server))
    assert isinstance(exc, ProviderError) and exc.kind == "auth" and not exc.transient
    assert "no quota left" in exc.message and "plan and billing" in exc.message
    assert exc.details["mid_stream"] is True and not any(isinstance(e, ResponseDone) for e in events)


# --- text, reasoning, function calls -------------------------------------------------------------


def test_text_streams_as_it_comes(responses_server: ResponsesServer) -> None:
    responses_server.enqueue(recorded("pydantic-ai-phase_streamed_on_part_start-2"))
    events, exc = run(model_on(responses_server, "gpt-5.5"))
    assert exc is None
    chunks = [e.text for e in events if isinstance(e, TextChunk)]
    assert len(chunks) > 5 and "".join(chunks) == done(events).text == "The capital of PotatoLand is **Potato City**."
    assert isinstance(events[0], TextChunk)  # nothing held back until the end


def test_both_phases_go_back_with_their_ids(responses_server: ResponsesServer) -> None:
    # gpt-5.3-codex narrates (`phase: commentary`) before its final answer: two message items.
    responses_server.enqueue(recorded("vercel-phase"))
    model = model_on(responses_server, "gpt-5.3-codex")
    message = done(run(model)[0])
    assert message.text.startswith("Got it") and "Here are a few **AI headlines" in message.text
    # The next request carries both items back: ids, phases and text.
    request = ModelRequest("Be terse.", [UserMessage("AI news today?"), message, UserMessage("thanks")])
    sent = model.request_params(request)["input"]
    recorded_items = output_items("vercel-phase")
    assert [i.get("type") for i in sent] == [None, "message", "message", None]
    for mine, theirs in zip(sent[1:3], recorded_items):
        assert (mine["id"], mine["phase"], mine["role"]) == (theirs["id"], theirs["phase"], "assistant")
        assert mine["content"][0]["text"] == theirs["content"][0]["text"]


def test_the_request_says_store_false_asks_for_encrypted_reasoning_and_sends_tools_unstrict(
    responses_server: ResponsesServer,
) -> None:
    responses_server.enqueue(response(text("ok")), response(text("ok")))
    run(model_on(responses_server, "gpt-5.1-codex-max", max_output_tokens=4_000))
    run(model_on(responses_server, "gpt-4.1"))
    reasoner, chat = (r.body for r in responses_server.response_requests)
    assert reasoner["store"] is False and reasoner["stream"] is True
    assert reasoner["include"] == ["reasoning.encrypted_content"]
    assert reasoner["instructions"] == "Be terse." and reasoner["input"] == [{"role": "user", "content": "hi"}]
    assert reasoner["max_output_tokens"] == 4_000 and reasoner["tool_choice"] == "auto"
    assert reasoner["tools"] == [
        {
            "type": "function",
            "name": "read",
            "description": READ.description,
            "parameters": READ.input_schema,
            "strict": False,
        }
    ]
    assert "reasoning" not in reasoner  # summaries are asked for only when the model is told to
    assert "include" not in chat  # a model that does not reason refuses it


def test_reasoning_effort_and_summaries_are_sent_when_asked(responses_server: ResponsesServer) -> None:
    responses_server.enqueue(response(reasoning("Thinking it over."), text("ok")))
    events, _ = run(model_on(responses_server, reasoning_effort="high", reasoning_summary="auto"))
    assert responses_server.response_requests[0].body["reasoning"] == {"effort": "high", "summary": "auto"}
    assert "".join(e.thinking for e in events if isinstance(e, ThinkingChunk)) == "Thinking it over."


@flue.tool
def calculator(a: float, b: float, op: str) -> str:
    """Add or multiply two numbers (`op`: `add` or `multiply`)."""
    return f"{a + b if op == 'add' else a * b:g}"


def _calculating_agent(model: Any, tmp_path: Any) -> Any:
    @flue.agent
    def calculating() -> str:
        flue.use_model(model, compaction=False)
        flue.use_sandbox(flue.local(str(tmp_path)))
        flue.use_tool(calculator)
        return "You calculate with the calculator tool."

    return calculating


def test_a_tool_round_trip_sends_the_encrypted_reasoning_back_unchanged(
    responses_server: ResponsesServer, tmp_path
) -> None:
    # A real store=False conversation of gpt-5.1-codex-max: reasoning, then calculator calls
    # (12 + 7, then * 3, then * 10), then the answer.
    responses_server.enqueue(*(recorded(n) for n in CALCULATION))
    model = model_on(responses_server, "gpt-5.1-codex-max")
    db = str(tmp_path / "s.sqlite")
    s = flue.init(_calculating_agent(model, tmp_path), db=db, settings=RunSettings(sleep=Sleeps()))
    assert s.prompt("What is (12 + 7) * 3 * 10?") == "The final result is **570**."
    bodies = [r.body for r in responses_server.response_requests]
    assert len(bodies) == 4 and all(b["store"] is False for b in bodies)
    assert all(b["include"] == ["reasoning.encrypted_content"] for b in bodies)
    thought, first_call = output_items(CALCULATION[0])
    second = bodies[1]["input"]
    assert [i.get("type") for i in second] == [None, "reasoning", "function_call", "function_call_output"]
    # The reasoning item goes back exactly as it came, encrypted content included.
    assert json.dumps(second[1], sort_keys=True) == json.dumps(thought, sort_keys=True)
    assert thought["encrypted_content"].startswith("gAAAA")
    call = second[2]
    assert (call["id"], call["call_id"], call["name"]) == (first_call["id"], first_call["call_id"], "calculator")
    assert json.loads(call["arguments"]) == {"a": 12, "b": 7, "op": "add"}
    assert second[3] == {"type": "function_call_output", "call_id": first_call["call_id"], "output": "19"}
    # Every later request repeats what came before unchanged and adds the next call and its output.
    assert bodies[2]["input"][:4] == second and bodies[3]["input"][:6] == bodies[2]["input"]
    assert [i["output"] for i in bodies[3]["input"] if i.get("type") == "function_call_output"] == ["19", "57", "570"]
    # Kept in the store: a reader that never saw the run sends the same item back.
    history = open_conversation(s.conversation_id, db=db).history()
    assert thought in to_responses_input(history, vision=False, model="gpt-5.1-codex-max")


def test_the_items_sent_back_are_the_ones_openai_accepted(responses_server: ResponsesServer, tmp_path) -> None:
    # pydantic-ai recorded this round trip with gpt-5.5, and the request OpenAI answered: the
    # input flue_nb builds for the second turn must carry the same items (reasoning verbatim;
    # commentary with its id and phase; the call with its id).
    @flue.tool
    def get_capital(country: str) -> str:
        """The capital of a country."""
        return "Potato City"

    responses_server.enqueue(*(recorded(f"pydantic-ai-phase_streamed_on_part_start-{n}") for n in (1, 2)))
    model = model_on(responses_server, "gpt-5.5")

    @flue.agent
    def narrating() -> str:
        flue.use_model(model, compaction=False)
        flue.use_sandbox(flue.local(str(tmp_path)))
        flue.use_tool(get_capital)
        return "Briefly narrate what you are about to do before calling each tool."

    s = flue.init(narrating, db=":memory:", settings=RunSettings(sleep=Sleeps()))
    assert s.prompt("What is the capital of PotatoLand?") == "The capital of PotatoLand is **Potato City**."
    mine = responses_server.response_requests[1].body["input"]
    theirs = json.loads((RECORDED / "pydantic-ai-phase_streamed_on_part_start-2.request-input.json").read_text())
    assert len(mine) == len(theirs) == 5
    assert mine[0] == theirs[0] == {"role": "user", "content": "What is the capital of PotatoLand?"}
    for ours, accepted in zip(mine[1:], theirs[1:]):
        for key in set(accepted) - {"content", "arguments"}:
            assert ours[key] == accepted[key], key
    assert json.loads(mine[3]["arguments"]) == json.loads(theirs[3]["arguments"])
    assert mine[2]["content"][0]["type"] == "output_text" and mine[2]["content"][0]["text"]


def test_a_reasoning_item_with_nothing_after_it_is_not_sent_back() -> None:
    # An answer cut off by `max_output_tokens` right after reasoning: OpenAI refuses a
    # reasoning item "without its required following item".
    cut = AssistantMessage([ThinkingPart("hm"), ProviderPart("openai", {"type": "reasoning", "id": "rs_1"})])
    anthropic = AssistantMessage([ProviderPart("anthropic", {"type": "server_tool_use"}), TextPart("Claude said")])
    sent = to_responses_input([UserMessage("a"), cut, UserMessage("b"), anthropic], vision=False, model="m")
    assert sent == [
        {"role": "user", "content": "a\n\nb"},
        {"role": "assistant", "content": "Claude said"},  # no item of this API behind it: plain text
    ]


def test_the_parts_survive_the_store_and_build_the_same_input(responses_server: ResponsesServer) -> None:
    responses_server.enqueue(recorded("pydantic-ai-phase_streamed_on_part_start-1"))
    events, _ = run(model_on(responses_server, "gpt-5.5"))
    message = done(events)
    result = ToolResultMessage(message.tool_calls[0].id, "get_capital", "Potato City")
    history = [UserMessage("q"), message, result]
    stored = [message_from_dict(message_to_dict(m)) for m in history]
    assert to_responses_input(stored, vision=False, model="m") == to_responses_input(history, vision=False, model="m")


def test_arguments_sent_only_in_the_finished_item_are_the_calls_input(responses_server: ResponsesServer) -> None:
    # LM Studio sends no argument deltas (recorded: `vercel-lmstudio-tool-call`); made up here too.
    responses_server.enqueue(response(function_call("call_9", "read", {"path": "a.txt"}, deltas=False)))
    events, _ = run(model_on(responses_server))
    assert [(c.id, c.input) for c in done(events).tool_calls] == [("call_9", {"path": "a.txt"})]


def test_an_incomplete_response_says_it_was_cut_off(responses_server: ResponsesServer) -> None:
    responses_server.enqueue(response(text("The answer is"), status="incomplete"))
    events, exc = run(model_on(responses_server))
    assert exc is None and done(events).stop_reason == "max_tokens"


# --- usage ------------------------------------------------------------------------------------


def test_cached_and_reasoning_tokens_are_counted_and_shown_in_status(
    responses_server: ResponsesServer, tmp_path
) -> None:
    from flue_nb.notebook.views.history import status_view

    responses_server.enqueue(recorded("vercel-phase"))
    model = model_on(responses_server, "gpt-5.3-codex")

    @flue.agent
    def tested() -> str:
        flue.use_model(model, compaction=False)
        flue.use_sandbox(flue.local(str(tmp_path)))
        return "You are tested."

    s = flue.init(tested, db=":memory:", settings=RunSettings(sleep=Sleeps()))
    s.prompt("AI news today?")
    status = s.status()
    # Recorded: 7,112 input tokens of which 3,072 cached; 463 output of which 64 reasoning.
    assert status.usage == Usage(4_040, 463, 3_072, 0, 64)
    assert status.used_tokens == 7_575
    lines = status_view(status, store="memory").plain.split("\n")
    assert "tokens: 4,040 in, 463 out (64 of them reasoning), 3,072 cache read, 0 cache write" in lines
    assert "cache: 43 % of prompt tokens read from cache" in lines


def test_a_server_that_reports_no_usage_leaves_it_unreported(responses_server: ResponsesServer) -> None:
    responses_server.enqueue(response(text("ok"), no_usage=True))
    events, _ = run(model_on(responses_server))
    assert done(events).usage is None


# --- retries, timeouts, budgets, errors -------------------------------------------------------------


def test_429_and_500_are_retried_with_backoff_then_the_recorded_answer_arrives(
    responses_server: ResponsesServer, tmp_path
) -> None:
    responses_server.enqueue(
        error(429, "Rate limit reached", type="requests", code="rate_limit_exceeded", retry_after="1"),
        error(500, "The server had an error", type="server_error"),
        recorded("vercel-reasoning-encrypted-content-4"),
    )
    sleeps = Sleeps()
    model = model_on(responses_server, "gpt-5.1-codex-max")
    s = flue.init(_calculating_agent(model, tmp_path), db=":memory:", settings=RunSettings(sleep=sleeps))
    assert s.prompt("what is it?") == "The final result is **570**."
    assert len(responses_server.response_requests) == 3 and len(sleeps.delays) == 2  # the runtime's, not the SDK's


def test_each_failure_is_classified_as_on_chat_completions(responses_server: ResponsesServer) -> None:
    responses_server.enqueue(
        error(429, "Rate limit reached", type="requests", code="rate_limit_exceeded", retry_after="7"),
        error(429, "You exceeded your current quota", type="insufficient_quota", code="insufficient_quota"),
        error(400, "Your input exceeds the context window of this model.", code="context_length_exceeded"),
        error(401, "Incorrect API key provided", type="invalid_request_error"),
    )
    model = model_on(responses_server)
    limited, quota, overflow, auth = (run(model)[1] for _ in range(4))
    assert isinstance(limited, ProviderHTTPError) and limited.kind == "rate_limit" and limited.transient
    assert limited.details["retry_after"] == 7.0
    assert isinstance(quota, ProviderError) and not quota.transient and "billing" in quota.message
    assert isinstance(overflow, ContextOverflowError)
    assert isinstance(auth, ProviderHTTPError) and "OPENAI_API_KEY" in auth.message
    assert "`OpenAIResponsesModel`" in auth.message


def test_a_model_chat_completions_do_not_serve_says_to_use_the_responses_api(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(
        error(
            404, "This model is only supported in v1/responses and not in v1/chat/completions.", code="model_not_found"
        )
    )
    _, exc = run(OpenAIModel("gpt-5-pro", base_url=openai_server.base_url, api_key="k", context_window=8_000))
    assert isinstance(exc, ProviderHTTPError) and not exc.transient
    assert "only on the Responses API" in exc.message and "`openai-responses/gpt-5-pro`" in exc.message


def test_a_server_slow_to_start_is_a_retryable_timeout(responses_server: ResponsesServer) -> None:
    responses_server.enqueue(response(text("late"), delay=2.0))
    _, exc = run(model_on(responses_server, request_timeout=0.3))
    assert isinstance(exc, ProviderError) and exc.kind == "timeout" and exc.transient
    assert "did not start answering for `gpt-5` within 0.3 s" in exc.message


def test_a_stream_without_response_completed_is_a_connection_error(responses_server: ResponsesServer) -> None:
    stream = recorded("vercel-reasoning-encrypted-content-1")
    stream.events = stream.events[:-1]  # the connection closed after the call's last argument
    responses_server.enqueue(stream)
    events, exc = run(model_on(responses_server))
    assert isinstance(exc, ProviderError) and exc.kind == "connection" and exc.transient
    assert "ended before `response.completed`" in exc.message and not any(isinstance(e, ResponseDone) for e in events)


def test_a_failed_response_is_classified_by_its_error_code(responses_server: ResponsesServer) -> None:
    stream = response(text("partial"))
    failed = {"type": "response.failed", "sequence_number": 99, "response": {"id": "resp_x", "status": "failed",
              "model": "gpt-test", "output": [], "error": {"code": "server_error", "message": "The model failed."}}}  # fmt: skip
    stream.events[-1] = ("response.failed", json.dumps(failed))
    responses_server.enqueue(stream)
    _, exc = run(model_on(responses_server))
    assert isinstance(exc, ProviderError) and exc.kind == "server" and exc.transient
    assert "failed mid-response: The model failed." in exc.message


def test_an_output_budget_stops_before_the_call_that_would_pass_it(responses_server: ResponsesServer, tmp_path) -> None:
    responses_server.enqueue(*(recorded(n) for n in CALCULATION))
    model = model_on(responses_server, "gpt-5.1-codex-max")
    s = flue.init(_calculating_agent(model, tmp_path), db=":memory:", settings=RunSettings(sleep=Sleeps()))
    with pytest.raises(flue.BudgetExceededError) as info:
        s.prompt("What is (12 + 7) * 3 * 10?", max_output_tokens=60)
    # The first call may answer in 60 tokens (sent as `max_output_tokens`) and used 28 (recorded);
    # the 32 left are fewer than an answer needs.
    (only,) = responses_server.response_requests
    assert only.body["max_output_tokens"] == 60
    assert "received 28 output tokens of its 60" in info.value.message


def test_openai_prices_apply_to_the_responses_provider_and_pro_models_are_never_underpriced() -> None:
    codex = OpenAIResponsesModel("gpt-5.1-codex-max", api_key="k")
    assert codex.info.id == "openai/gpt-5.1-codex-max" and codex.info.price == price_of("openai/gpt-5.1")
    assert price_of("openai/gpt-5-pro") is not None and price_of("openai/gpt-5-pro").output == 120.0
    assert price_of("openai/gpt-5.4-pro") is None  # not $2.50/$15 like gpt-5.4: no known price
    assert price_of("openai/gpt-5.3-codex") is not None


# --- specs, tracing ------------------------------------------------------------------------------


def test_the_spec_names_the_responses_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    assert split_spec("openai-responses/gpt-5") == ("openai-responses", "gpt-5")
    assert split_spec("openai-responses:gpt-5.1-codex-max") == ("openai-responses", "gpt-5.1-codex-max")
    model = resolve_model("openai-responses/gpt-5", base_url="http://127.0.0.1:9/v1")
    assert isinstance(model, OpenAIResponsesModel) and model.model_id == "gpt-5"
    assert type(resolve_model("openai/gpt-5")).__name__ == "OpenAIModel"  # chat completions stay the default


def test_a_missing_key_names_the_variable_in_the_cell() -> None:
    from flue_nb.notebook.kernel.assistant import missing_key_help

    assert missing_key_help("openai-responses/gpt-5", "no key").endswith("%env OPENAI_API_KEY=sk-...")


def test_a_responses_call_is_one_chat_span_naming_openai(responses_server: ResponsesServer, tmp_path) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is in the test extra")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    responses_server.enqueue(recorded("vercel-phase"))
    model = model_on(responses_server, "gpt-5.3-codex")

    @flue.agent
    def traced() -> None:
        flue.use_model(model, compaction=False)

    flue.instrument(tracer_provider=tracer_provider)
    try:
        flue.init(traced, db=":memory:").prompt("hi")
        tracing.flush()
    finally:
        tracing._uninstrument()
    clients = [sp for sp in exporter.get_finished_spans() if sp.kind is SpanKind.CLIENT]
    (chat,) = clients
    assert chat.name == "chat 127.0.0.1/gpt-5.3-codex"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.response.model"] == "127.0.0.1/gpt-5.3-codex"
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 3_072
    assert chat.attributes["gen_ai.usage.output_tokens"] == 463
