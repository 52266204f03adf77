"""Offline models: scripted and function-backed, for tests, demos and CI runs."""

from ..runtime.cassette import CassetteDriftError, RecordingModel, ReplayModel
from ..runtime.model import Model, ModelInfo, ModelRequest
from ..runtime.offline import Fail, FunctionModel, Reply, ScriptedModel, fail, reply, tool_call

__all__ = [
    "CassetteDriftError",
    "Fail",
    "FunctionModel",
    "Model",
    "ModelInfo",
    "ModelRequest",
    "RecordingModel",
    "Reply",
    "ReplayModel",
    "ScriptedModel",
    "fail",
    "reply",
    "tool_call",
]
