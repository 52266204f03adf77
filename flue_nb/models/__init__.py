"""Models: the Anthropic, OpenAI-compatible and OpenAI Responses providers, and offline ones
(scripted, function-backed, cassettes) for tests, demos and CI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flue_nb.runtime.providers.cassette import CassetteDriftError, RecordingModel, ReplayModel
from flue_nb.runtime.providers.model import Model, ModelInfo, ModelRequest
from flue_nb.runtime.providers.offline import Fail, FunctionModel, Reply, ScriptedModel, fail, reply, tool_call

if TYPE_CHECKING:  # pragma: no cover - loaded lazily below
    from flue_nb.runtime.providers.anthropic import AnthropicModel
    from flue_nb.runtime.providers.openai import OpenAIModel
    from flue_nb.runtime.providers.openai_responses import OpenAIResponsesModel

__all__ = [
    "AnthropicModel",
    "CassetteDriftError",
    "Fail",
    "FunctionModel",
    "Model",
    "ModelInfo",
    "ModelRequest",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "RecordingModel",
    "Reply",
    "ReplayModel",
    "ScriptedModel",
    "fail",
    "reply",
    "tool_call",
]

# Provider modules load on first use: the Anthropic one imports the SDK's transport (and the
# OpenAI-compatible one imports the Anthropic one's; the `openai` SDK only at a request).
_LAZY = {
    "AnthropicModel": "flue_nb.runtime.providers.anthropic",
    "OpenAIModel": "flue_nb.runtime.providers.openai",
    "OpenAIResponsesModel": "flue_nb.runtime.providers.openai_responses",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flue_nb.models' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
