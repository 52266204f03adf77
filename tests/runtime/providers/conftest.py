"""Fixtures shared by the Anthropic provider's tests."""

from __future__ import annotations

import pytest

from flue_nb.runtime.providers.anthropic import TRANSPORT_ENV


@pytest.fixture(params=["sdk", "http"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once through the SDK and once over plain httpx2 (a cold process's first call)."""
    monkeypatch.setenv(TRANSPORT_ENV, request.param)
    return str(request.param)
