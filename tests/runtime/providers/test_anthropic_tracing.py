"""No double counting (issue 25.3): with tracing on, an Anthropic call is one `chat` span, through
the SDK and over the cold-start httpx2 transport alike; the SDK's own span is turned off."""

from __future__ import annotations

import asyncio

import pytest

import flue_nb as flue
from flue_nb.runtime import tracing
from flue_nb.runtime.providers.anthropic import AnthropicModel
from tests.anthropic_server import AnthropicServer, stream, text

pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is in the test extra")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

pytestmark = pytest.mark.usefixtures("transport")

EXPORTER = InMemorySpanExporter()


@pytest.fixture
def global_provider():
    # The SDK traces through the global provider, which can be set once per process.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    flue.instrument()
    yield EXPORTER
    tracing._uninstrument()


def test_an_anthropic_call_is_one_chat_span_on_either_transport(server: AnthropicServer, global_provider) -> None:
    server.enqueue(stream(text("Traced."), model="claude-sonnet-4-6-20250929"))
    model = AnthropicModel("claude-sonnet-4-6", api_key="test", base_url=server.url)

    @flue.agent
    def traced():
        flue.use_model(model, compaction=False)

    assert flue.init(traced, db=":memory:").prompt("hi") == "Traced."
    tracing.flush()
    clients = [sp for sp in global_provider.get_finished_spans() if sp.kind is SpanKind.CLIENT]
    assert [sp.name for sp in clients] == ["chat claude-sonnet-4-6"]
    (chat,) = clients
    assert chat.attributes["gen_ai.provider.name"] == "anthropic"
    assert chat.attributes["gen_ai.response.model"] == "claude-sonnet-4-6-20250929"


def test_the_sdk_would_trace_the_call_itself(server: AnthropicServer, global_provider) -> None:
    # What the option turns off: a client made without it emits its own span of the call.
    import anthropic

    server.enqueue(stream(text("ok")))

    async def call() -> None:
        client = anthropic.AsyncAnthropic(api_key="test", base_url=server.url, max_retries=0)
        events = await client.messages.create(
            model="claude-sonnet-4-6", max_tokens=10, messages=[{"role": "user", "content": "hi"}], stream=True
        )
        async for _ in events:
            pass
        await client.close()

    asyncio.run(call())
    assert [sp for sp in global_provider.get_finished_spans() if sp.kind is SpanKind.CLIENT]
