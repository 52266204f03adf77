"""Offline models: scripted and function-backed, for tests, demos and CI runs."""

from flue_nb.runtime.providers.cassette import CassetteDriftError, RecordingModel, ReplayModel
from flue_nb.runtime.providers.model import Model, ModelInfo, ModelRequest
from flue_nb.runtime.providers.offline import Fail, FunctionModel, Reply, ScriptedModel, fail, reply, tool_call

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
