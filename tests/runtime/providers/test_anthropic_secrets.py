"""A provider error body that echoes the key sent never carries it into the error (issue 20.2)."""

from __future__ import annotations

import asyncio

import pytest

from flue_nb.runtime.errors import ProviderHTTPError
from flue_nb.runtime.messages import UserMessage
from flue_nb.runtime.providers.anthropic import AnthropicModel
from flue_nb.runtime.providers.model import ModelRequest
from flue_nb.runtime.providers.streaming import MAX_ERROR_TEXT
from tests.anthropic_server import AnthropicServer, error

pytestmark = pytest.mark.usefixtures("transport")

KEY = "sk-ant-api03-echoed-7c1d2e3f4a5b6c7d8e9f"


def fail(server: AnthropicServer) -> ProviderHTTPError:
    model = AnthropicModel("claude-sonnet-4-6", api_key=KEY, base_url=server.url)

    async def go() -> None:
        request = ModelRequest(system="terse", messages=[UserMessage("hi")])
        async for _ in model.stream(request):
            pass

    with pytest.raises(ProviderHTTPError) as info:
        asyncio.run(go())
    return info.value


def test_a_401_that_echoes_the_key_names_it_redacted(server: AnthropicServer) -> None:
    server.enqueue(error(401, "authentication_error", f"invalid x-api-key: {KEY!r}"))
    exc = fail(server)
    assert "invalid x-api-key: '[redacted:ANTHROPIC_API_KEY]'" in exc.message
    assert KEY[:12] not in exc.message and KEY[:12] not in str(exc.to_dict())


def test_a_long_body_cut_inside_the_echoed_key_leaves_no_prefix_of_it(server: AnthropicServer) -> None:
    filler = "x" * (MAX_ERROR_TEXT - 10)  # the cap falls 10 characters into the key
    server.enqueue(error(400, "invalid_request_error", filler + KEY + " more"))
    exc = fail(server)
    assert KEY[:10] not in exc.message


def test_an_openai_compatible_body_cut_inside_the_echoed_key_leaves_no_prefix_of_it(openai_server) -> None:
    pytest.importorskip("openai")
    from flue_nb.runtime.providers.openai import OpenAIModel
    from tests.openai_server import error as openai_error

    key = "sk-proj-echoed-1a2b3c4d5e6f7a8b9c0d"
    openai_server.enqueue(openai_error(401, "x" * (MAX_ERROR_TEXT - 10) + key, type="invalid_request_error"))
    model = OpenAIModel("gpt-4o", base_url=openai_server.base_url, api_key=key)

    async def go() -> None:
        await model.prepare()
        async for _ in model.stream(ModelRequest(system="terse", messages=[UserMessage("hi")])):
            pass

    with pytest.raises(ProviderHTTPError) as info:
        asyncio.run(go())
    assert key[:10] not in info.value.message
