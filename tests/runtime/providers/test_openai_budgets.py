"""Budgets are real (issue 23, point 3), and every spec form reaches the right provider (point 2):
known OpenAI models from the table, a compatible server asked where it says (vLLM's model list,
Ollama's model info), otherwise a small default with a one-time warning saying how to set it."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.providers import price_of, resolve_model, split_spec
from flue_nb.runtime.providers._anthropic_cloud import CloudClaudeModel
from flue_nb.runtime.providers._openai_limits import DEFAULT_CONTEXT_WINDOW, SERVER_DEFAULT_CONTEXT
from flue_nb.runtime.providers.anthropic import AnthropicModel
from flue_nb.runtime.providers.openai import OpenAIModel
from tests.openai_server import OpenAIServer


def prepared(model: OpenAIModel) -> OpenAIModel:
    asyncio.run(model.prepare())
    return model


def test_known_openai_models_come_from_the_table_without_asking() -> None:
    info = OpenAIModel("gpt-4o-2024-08-06", api_key="k").info
    assert (info.context_window, info.max_output_tokens) == (128_000, 16_384)
    assert OpenAIModel("gpt-4.1-mini", api_key="k").info.context_window == 1_047_576
    # The GPT-5 family takes 400K of which 128K are output: a prompt gets 272K.
    assert OpenAIModel("gpt-5-mini", api_key="k").info.context_window == 272_000
    assert OpenAIModel("gpt-4o", api_key="k").vision and not OpenAIModel("gpt-3.5-turbo", api_key="k").vision
    assert OpenAIModel("gpt-4o", api_key="k", context_window=50_000).vision  # a given window keeps the rest


def test_vllm_is_asked_for_max_model_len(openai_server: OpenAIServer) -> None:
    openai_server.models = [{"id": "Qwen/Qwen3-8B", "object": "model", "max_model_len": 32_768}]
    model = prepared(OpenAIModel("Qwen/Qwen3-8B", base_url=openai_server.base_url))
    assert model.info.context_window == 32_768 and model.info.max_output_tokens == 8_192
    # Asked once per server and model, not per cell (the assistant builds a model per cell).
    again = prepared(OpenAIModel("Qwen/Qwen3-8B", base_url=openai_server.base_url))
    assert again.info.context_window == 32_768
    assert [r.path for r in openai_server.requests] == ["/v1/models"]


def test_ollama_num_ctx_and_capabilities_are_read_from_api_show(openai_server: OpenAIServer) -> None:
    openai_server.ollama["llava:13b"] = {
        "parameters": 'num_ctx                        16384\nstop                           "</s>"',
        "model_info": {"llama.context_length": 131_072},
        "capabilities": ["completion", "vision"],
    }
    model = prepared(OpenAIModel("llava:13b", base_url=openai_server.base_url))
    assert model.info.context_window == 16_384 and model.vision
    shown = next(r for r in openai_server.requests if r.path == "/api/show")
    assert shown.body == {"model": "llava:13b"}


def test_ollama_without_num_ctx_is_budgeted_at_what_it_serves_and_warns(openai_server: OpenAIServer) -> None:
    # The model was trained on 128K, but Ollama serves its default unless told otherwise, and
    # drops the start of a longer prompt silently: budgeting 128K would lose the conversation.
    openai_server.ollama["llama3.1:8b"] = {"parameters": "", "model_info": {"llama.context_length": 131_072}}
    with pytest.warns(UserWarning, match="OLLAMA_CONTEXT_LENGTH") as caught:
        model = prepared(OpenAIModel("llama3.1:8b", base_url=openai_server.base_url))
    assert model.info.context_window == SERVER_DEFAULT_CONTEXT
    assert "context_window=N" in str(caught[0].message)


def test_a_loaded_ollama_model_reports_the_window_it_was_loaded_with(openai_server: OpenAIServer) -> None:
    openai_server.ollama["qwen3:8b"] = {
        "parameters": "",
        "model_info": {"qwen3.context_length": 40_960},
        "loaded_context": 32_768,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = prepared(OpenAIModel("qwen3:8b", base_url=openai_server.base_url))
    assert model.info.context_window == 32_768


def test_llama_cpp_reports_the_context_of_a_slot_in_props(openai_server: OpenAIServer) -> None:
    openai_server.props = {"default_generation_settings": {"n_ctx": 32_768}, "modalities": {"vision": True}}
    model = prepared(OpenAIModel("model", base_url=openai_server.base_url))
    assert model.info.context_window == 32_768 and model.vision


def test_lm_studio_reports_a_loaded_models_context(openai_server: OpenAIServer) -> None:
    openai_server.lmstudio["qwen3-8b"] = {
        "id": "qwen3-8b", "type": "llm", "state": "loaded", "max_context_length": 40_960, "loaded_context_length": 16_384,
    }  # fmt: skip
    model = prepared(OpenAIModel("qwen3-8b", base_url=openai_server.base_url))
    assert model.info.context_window == 16_384 and not model.vision


def test_lm_studio_before_loading_is_budgeted_at_its_default_and_warns(openai_server: OpenAIServer) -> None:
    openai_server.lmstudio["gemma-3-12b"] = {"id": "gemma-3-12b", "type": "vlm", "max_context_length": 131_072}
    with pytest.warns(UserWarning, match="LM Studio"):
        model = prepared(OpenAIModel("gemma-3-12b", base_url=openai_server.base_url))
    assert model.info.context_window == SERVER_DEFAULT_CONTEXT and model.vision


def test_an_unknown_model_on_a_silent_server_gets_a_small_budget_and_one_warning(openai_server: OpenAIServer) -> None:
    with pytest.warns(UserWarning, match="does not know the context window") as caught:
        model = prepared(OpenAIModel("mystery-8b", base_url=openai_server.base_url))
        prepared(OpenAIModel("mystery-8b", base_url=openai_server.base_url))
    assert len(caught) == 1
    assert model.info.context_window == DEFAULT_CONTEXT_WINDOW < 200_000


def test_explicit_limits_win_and_nothing_is_asked(openai_server: OpenAIServer) -> None:
    model = prepared(
        OpenAIModel("mystery-8b", base_url=openai_server.base_url, context_window=65_536, max_output_tokens=4_000)
    )
    assert (model.info.context_window, model.info.max_output_tokens) == (65_536, 4_000)
    assert openai_server.requests == []


def test_a_compacting_agent_on_a_small_server_model_compacts_at_its_window(openai_server: OpenAIServer) -> None:
    from flue_nb.runtime.core.compaction import threshold

    openai_server.models = [{"id": "small", "max_model_len": 8_192}]
    model = prepared(OpenAIModel("small", base_url=openai_server.base_url))
    assert threshold(model.info, None) < 8_192


# --- prices -------------------------------------------------------------------------------------


def test_only_openais_own_responses_are_priced() -> None:
    price = price_of("openai/gpt-4o-mini-2024-07-18")
    assert price is not None and (price.input, price.output, price.cache_read) == (0.15, 0.60, 0.075)
    assert price_of("127.0.0.1/gpt-4o") is None  # a local server's model costs nothing we know
    assert price_of("azure/gpt-4o") is None and price_of("bedrock/claude-sonnet-4-6") is None
    assert price_of("claude-sonnet-4-6") is not None  # stored Anthropic responses keep their price
    assert OpenAIModel("gpt-4o", api_key="k").info.price is not None
    assert OpenAIModel("gpt-4o", base_url="http://127.0.0.1:1/v1", context_window=8000).info.price is None


# --- specs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "parts"),
    [
        ("openai/gpt-5", ("openai", "gpt-5")),
        ("openai:gpt-5", ("openai", "gpt-5")),
        ("OpenAI/llama3.1:8b", ("openai", "llama3.1:8b")),
        ("openai:llama3.1:8b", ("openai", "llama3.1:8b")),
        ("anthropic:claude-sonnet-4-6", ("anthropic", "claude-sonnet-4-6")),
        (
            "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            ("bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ),
        ("my_model", ("", "my_model")),
    ],
)
def test_specs_split_on_the_first_separator(spec: str, parts: tuple[str, str]) -> None:
    assert split_spec(spec) == parts


def test_every_spec_form_resolves_to_its_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://res.azure.test")
    assert isinstance(resolve_model("anthropic/claude-sonnet-4-6"), AnthropicModel)
    openai_model = resolve_model("openai:gpt-4o", api_key="k")
    assert isinstance(openai_model, OpenAIModel) and openai_model.provider == "openai"
    azure = resolve_model("azure/my-gpt4o")
    assert isinstance(azure, OpenAIModel) and azure.provider == "azure"
    assert azure.base_url == "https://res.azure.test/openai"
    bedrock = resolve_model("bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    assert isinstance(bedrock, CloudClaudeModel) and bedrock.info.context_window == 200_000
    vertex = resolve_model("vertex/claude-opus-4-1@20250805")
    assert isinstance(vertex, CloudClaudeModel) and vertex.info.max_output_tokens == 32_000


def test_azure_without_an_endpoint_says_which_variable_to_set() -> None:
    with pytest.raises(ConfigError, match="AZURE_OPENAI_ENDPOINT"):
        resolve_model("azure/my-deployment")


def test_a_bare_gpt_id_suggests_the_openai_spec() -> None:
    with pytest.raises(ConfigError, match="openai/gpt-4o"):
        resolve_model("gpt-4o")
