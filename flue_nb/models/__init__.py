"""Offline models: scripted and function-backed, for tests, demos and CI runs."""

from ..runtime.model import Model, ModelInfo, ModelRequest
from ..runtime.offline import Fail, FunctionModel, Reply, ScriptedModel, fail, reply, tool_call

__all__ = [
    "Fail",
    "FunctionModel",
    "Model",
    "ModelInfo",
    "ModelRequest",
    "Reply",
    "ScriptedModel",
    "fail",
    "reply",
    "tool_call",
]
