"""Fixtures shared by the Anthropic provider's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flue_nb.runtime.providers import ALLOW_MODEL_REQUESTS_ENV
from flue_nb.runtime.providers.anthropic import TRANSPORT_ENV
from tests.anthropic_server import AnthropicServer


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    """A running loopback Messages API, stopped after the test."""
    with AnthropicServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _no_anthropic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The developer's own key or proxy must never leak into these tests.
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", TRANSPORT_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(ALLOW_MODEL_REQUESTS_ENV, "0")  # loopback only, whatever conftest says


@pytest.fixture(params=["sdk", "http"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once through the SDK and once over plain httpx2 (a cold process's first call)."""
    monkeypatch.setenv(TRANSPORT_ENV, request.param)
    return str(request.param)
