"""The public surface is part of the spec: pin it, and keep imports light and one-way."""

from __future__ import annotations

import subprocess
import sys

import flue_nb

EXPECTED = [
    "AgentDef",
    "AgentEnd",
    "AgentError",
    "BudgetExceededError",
    "AgentStart",
    "CompactionConfig",
    "CompactionEnd",
    "CompactionStart",
    "ConfigError",
    "ContextOverflowError",
    "DelegationDepthExceededError",
    "ErrorInfo",
    "Event",
    "FlueError",
    "HookError",
    "Idle",
    "LimitExceeded",
    "Log",
    "McpConnectionError",
    "MessageEnd",
    "MessageStart",
    "ModelNotConfiguredError",
    "ModelRefusedError",
    "NoSandboxError",
    "ProviderError",
    "ProviderHTTPError",
    "Receipt",
    "RunError",
    "SandboxError",
    "SandboxTimeoutError",
    "Session",
    "SessionBusyError",
    "Signal",
    "StoreError",
    "SubmissionAbortedError",
    "SubmissionQueued",
    "SubmissionRecovery",
    "SubmissionRetryExhaustedError",
    "SubmissionRunning",
    "SubmissionSettled",
    "SubmissionTimeoutError",
    "TaskEnd",
    "TaskStart",
    "TextDelta",
    "ThinkingDelta",
    "Tool",
    "ToolCallInfo",
    "ToolContext",
    "ToolEnd",
    "ToolInputValidationError",
    "ToolNameConflictError",
    "ToolOutput",
    "ToolRetry",
    "ToolStart",
    "TurnEnd",
    "TurnLimitExceededError",
    "TurnStart",
    "agent",
    "chat",
    "define_subagent",
    "define_tool",
    "init",
    "instrument",
    "kernel",
    "load_ipython_extension",
    "local",
    "serve",
    "tool",
    "unload_ipython_extension",
    "use_agent_finish",
    "use_agent_start",
    "use_instruction",
    "use_mcp",
    "use_model",
    "use_persistent_state",
    "use_response_finish",
    "use_response_start",
    "use_sandbox",
    "use_skill",
    "use_subagent",
    "use_tool",
]


def test_public_names_are_pinned_and_sorted():
    assert flue_nb.__all__ == sorted(EXPECTED)


def test_every_public_name_resolves():
    for name in flue_nb.__all__:
        assert getattr(flue_nb, name) is not None


def test_offline_models_are_public():
    from flue_nb import models

    assert {"ScriptedModel", "FunctionModel", "reply", "tool_call", "fail"} <= set(models.__all__)


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


def test_importing_flue_nb_is_light():
    mods = _modules_after("import flue_nb")
    assert (
        not {
            "anthropic",
            "openai",
            "tiktoken",
            "anywidget",
            "ipywidgets",
            "IPython",
            "pydantic",
            "mcp",
            "opentelemetry",
        }
        & mods
    )


def test_the_runtime_never_imports_ipython_or_the_sdk_or_widgets():
    code = (
        "import flue_nb as flue\n"
        "from flue_nb.models import ScriptedModel\n"
        "@flue.agent\n"
        "def a():\n"
        "    flue.use_model(ScriptedModel(['hi']))\n"
        "    flue.use_sandbox(flue.local('.'))\n"
        "print(flue.init(a, db=':memory:').prompt('hello'))\n"
    )
    mods = _modules_after(code)
    assert not {"IPython", "ipykernel", "anthropic", "openai", "anywidget", "ipywidgets", "mcp", "opentelemetry"} & mods
    assert "flue_nb.notebook" not in mods


MODELS = [
    "AnthropicModel",
    "CassetteDriftError",
    "Fail",
    "FunctionModel",
    "Model",
    "ModelInfo",
    "ModelRequest",
    "OpenAIModel",
    "RecordingModel",
    "Reply",
    "ReplayModel",
    "ScriptedModel",
    "fail",
    "reply",
    "tool_call",
]
EVENTS = [
    "AgentEnd",
    "AgentStart",
    "CompactionEnd",
    "CompactionStart",
    "ErrorInfo",
    "Event",
    "EventBus",
    "EventType",
    "Idle",
    "Log",
    "MessageEnd",
    "MessageStart",
    "Signal",
    "SubmissionQueued",
    "SubmissionRecovery",
    "SubmissionRunning",
    "SubmissionSettled",
    "TaskEnd",
    "TaskStart",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallInfo",
    "ToolEnd",
    "ToolStart",
    "ToolUpdate",
    "TurnEnd",
    "TurnStart",
]


def test_offline_model_names_are_pinned_and_resolve():
    from flue_nb import models

    assert sorted(models.__all__) == sorted(MODELS)
    for name in MODELS:
        assert getattr(models, name) is not None


def test_event_names_are_pinned_and_every_contract_event_type_has_exactly_one_class():
    from typing import get_args

    from flue_nb.runtime import events

    assert sorted(events.__all__) == sorted(EVENTS)
    classes = get_args(events.Event)
    types = [c.__dataclass_fields__["type"].default for c in classes]
    assert sorted(types) == sorted(get_args(events.EventType))  # one class per type of contract 15.2
    for cls in classes:
        assert cls.__dataclass_params__.frozen, cls
        assert cls.__name__ in events.__doc__, f"{cls.__name__} is missing from the module docstring"


def test_the_notebook_layer_uses_only_the_runtimes_public_modules():
    import pathlib
    import re

    root = pathlib.Path(flue_nb.__file__).parent
    offenders = []
    for path in [*root.joinpath("notebook").rglob("*.py"), root / "cli.py"]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = re.search(r"(?:from|import) (flue_nb\.runtime[\w.]*)", line)
            if m and (".core" in m.group(1) or re.search(r"\._\w", m.group(1))):
                offenders.append(f"{path.relative_to(root)}:{n}: {m.group(1)}")
    assert not offenders, "the notebook layer reaches into runtime internals:\n" + "\n".join(offenders)


def test_provider_and_event_names_users_need_are_public():
    from flue_nb import TextDelta, ThinkingDelta, ToolEnd
    from flue_nb.models import AnthropicModel
    from flue_nb.runtime import events
    from flue_nb.runtime.providers import anthropic

    assert AnthropicModel is anthropic.AnthropicModel
    assert (TextDelta, ThinkingDelta, ToolEnd) == (events.TextDelta, events.ThinkingDelta, events.ToolEnd)


# Each runtime layer imports only the layers below it: sandbox < tools < agent < core.
_LAYERS = ["sandbox", "tools", "agent", "core"]


def test_no_runtime_layer_imports_a_layer_above_it():
    import pathlib
    import re

    root = pathlib.Path(flue_nb.__file__).parent / "runtime"
    offenders = []
    for i, layer in enumerate(_LAYERS):
        above = "|".join([*_LAYERS[i + 1 :], "session"])
        for path in root.joinpath(layer).rglob("*.py"):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(rf"(?:from|import) flue_nb\.runtime\.(?:{above})\b", line):
                    offenders.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert not offenders, "imports running up the layers:\n" + "\n".join(offenders)
