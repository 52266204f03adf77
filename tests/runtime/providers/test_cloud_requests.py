"""Bedrock, Vertex and Azure at the request level (issue 23, points 2, 5): the SDKs' own cloud
clients against loopback endpoints, with the credentials they need injected (no cloud account)."""

from __future__ import annotations

import pytest

from flue_nb.runtime.errors import ModelNotConfiguredError, ProviderHTTPError
from flue_nb.runtime.providers._anthropic_cloud import CloudClaudeModel, family_id
from flue_nb.runtime.providers.model import ResponseDone
from flue_nb.runtime.providers.openai import OpenAIModel
from tests.anthropic_server import AnthropicServer, error, stream, text
from tests.openai_server import OpenAIServer, chat
from tests.openai_server import text as otext
from tests.provider_wires import collect as run


@pytest.mark.parametrize(
    ("cloud_id", "family"),
    [
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929"),
        ("anthropic.claude-3-5-haiku-20241022-v1:0", "claude-3-5-haiku-20241022"),
        ("claude-opus-4-1@20250805", "claude-opus-4-1-20250805"),
        ("claude-sonnet-4-6", "claude-sonnet-4-6"),
    ],
)
def test_cloud_ids_map_to_their_claude_family(cloud_id: str, family: str) -> None:
    assert family_id(cloud_id) == family


def test_vertex_streams_through_the_sdks_vertex_client(server: AnthropicServer) -> None:
    server.enqueue(stream(text("Hello from Vertex")))
    model = CloudClaudeModel(
        "vertex", "claude-sonnet-4-5@20250929", region="us-east5", project_id="proj", access_token="ya29.token",
        base_url=server.url,
    )  # fmt: skip
    events, exc = run(model)
    assert exc is None
    assert isinstance(events[-1], ResponseDone) and events[-1].message.text == "Hello from Vertex"
    assert events[-1].message.model == "vertex/claude-test"  # the provider is named; no price
    (request,) = server.requests
    assert request.path == (
        "/projects/proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    )
    assert request.headers["authorization"] == "Bearer ya29.token"
    # The version is the SDK's; the model travels in the URL, not the body.
    assert request.body["anthropic_version"] and "model" not in request.body
    assert request.body["system"][0]["text"] == "Be terse." and request.body["max_tokens"] == 64_000


def test_bedrock_builds_its_request_with_the_sdks_bedrock_client(server: AnthropicServer) -> None:
    server.enqueue(error(403, "access_denied", "You don't have access to the model"))
    model_id = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    model = CloudClaudeModel(
        "bedrock", model_id, aws_region="us-west-2", api_key="bedrock-api-key", base_url=server.url
    )
    _, exc = run(model)
    assert isinstance(exc, ProviderHTTPError) and exc.kind == "auth" and not exc.transient
    assert "Bedrock refused" in exc.message and "ANTHROPIC_API_KEY" not in exc.message
    (request,) = server.requests
    assert request.path in (
        f"/model/{model_id}/invoke-with-response-stream",
        f"/model/{model_id.replace(':', '%3A')}/invoke-with-response-stream",
    )
    assert request.headers["authorization"] == "Bearer bedrock-api-key"
    assert request.body["anthropic_version"] and "model" not in request.body


def test_bedrock_without_a_region_says_what_it_needs() -> None:
    _, exc = run(CloudClaudeModel("bedrock", "anthropic.claude-sonnet-4-6", api_key="k"))
    assert isinstance(exc, ModelNotConfiguredError) and "AWS_REGION" in exc.message


def test_azure_goes_to_the_deployment_with_its_api_version_and_key(openai_server: OpenAIServer) -> None:
    openai_server.enqueue(chat(otext("Hello from Azure")))
    model = OpenAIModel(
        "my-gpt-4o",
        azure_endpoint=openai_server.url,
        api_key="azure-key-0123456789",
        api_version="2024-10-21",
        context_window=128_000,
    )
    assert model.provider == "azure"
    events, exc = run(model)
    assert exc is None and events[-1].message.text == "Hello from Azure"
    assert events[-1].message.model == "azure/gpt-test"
    (request,) = openai_server.chat_requests
    assert request.path == "/openai/deployments/my-gpt-4o/chat/completions?api-version=2024-10-21"
    assert request.headers["api-key"] == "azure-key-0123456789"
    assert "max_completion_tokens" in request.body and "max_tokens" not in request.body


def test_azure_without_a_key_says_which_variable_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUE_ALLOW_MODEL_REQUESTS", "1")
    _, exc = run(OpenAIModel("dep", azure_endpoint="https://res.azure.test", context_window=8000))
    assert isinstance(exc, ModelNotConfiguredError) and "AZURE_OPENAI_API_KEY" in exc.message
