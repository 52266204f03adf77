"""Fixtures shared by the provider tests (Anthropic, OpenAI-compatible, OpenAI Responses, Bedrock and Vertex)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flue_nb.runtime.providers import ALLOW_MODEL_REQUESTS_ENV
from flue_nb.runtime.providers.anthropic import TRANSPORT_ENV
from tests.anthropic_server import AnthropicServer
from tests.openai_responses_server import ResponsesServer
from tests.openai_server import OpenAIServer
from tests.provider_wires import Wire, running_wire


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    """A running loopback Messages API, stopped after the test."""
    with AnthropicServer() as srv:
        yield srv


_PROVIDER_ENV = (
    "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
    "OPENAI_API_VERSION", "AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_AD_TOKEN",
    "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE", "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY", "ANTHROPIC_BEDROCK_BASE_URL", "CLOUD_ML_REGION", "ANTHROPIC_VERTEX_PROJECT_ID",
    "ANTHROPIC_VERTEX_BASE_URL",
)  # fmt: skip


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """A running loopback chat-completions API, stopped after the test."""
    with OpenAIServer() as srv:
        yield srv


@pytest.fixture
def responses_server() -> Iterator[ResponsesServer]:
    """A running loopback Responses API, stopped after the test."""
    with ResponsesServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _fresh_learnt_limits() -> Iterator[None]:
    # Windows learnt from a server are kept per process; each test's server is a new one.
    from flue_nb.runtime.providers import _openai_limits, openai

    yield
    openai._LEARNT.clear()
    _openai_limits._WARNED.clear()


@pytest.fixture(autouse=True)
def _no_anthropic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The developer's own key or proxy must never leak into these tests.
    for name in (*_PROVIDER_ENV, TRANSPORT_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(ALLOW_MODEL_REQUESTS_ENV, "0")  # loopback only, whatever conftest says


@pytest.fixture(params=["sdk", "http"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once through the SDK and once over plain httpx2 (a cold process's first call)."""
    monkeypatch.setenv(TRANSPORT_ENV, request.param)
    return str(request.param)


@pytest.fixture(params=["anthropic", "openai", "openai-responses"])
def wire(request: pytest.FixtureRequest) -> Iterator[Wire]:
    """Each test once per provider, on that provider's real SDK and loopback server."""
    with running_wire(str(request.param)) as w:
        yield w
