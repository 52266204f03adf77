"""The public surface is part of the spec: pin it, and keep imports light and one-way."""

from __future__ import annotations

import subprocess
import sys

import flue_nb

EXPECTED = [
    "AgentDef", "CompactionConfig", "ConfigError", "ContextOverflowError", "DelegationDepthExceededError",
    "Event", "FlueError", "HookError", "LimitExceeded", "McpConnectionError", "ModelNotConfiguredError", "NoSandboxError",
    "ProviderError", "ProviderHTTPError", "Receipt", "RunError", "SandboxError", "SandboxTimeoutError",
    "Session", "SessionBusyError", "StoreError", "SubmissionAbortedError", "SubmissionRetryExhaustedError",
    "SubmissionTimeoutError", "Tool", "ToolContext", "ToolInputValidationError", "ToolNameConflictError",
    "ToolOutput", "ToolRetry", "TurnLimitExceededError", "agent", "chat", "define_subagent", "define_tool", "init", "kernel",
    "load_ipython_extension", "local", "tool", "unload_ipython_extension", "use_instruction", "use_mcp", "use_model",
    "use_persistent_state", "use_sandbox", "use_skill", "use_subagent", "use_tool",
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
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_importing_flue_nb_is_light():
    mods = _modules_after("import flue_nb")
    assert not {"anthropic", "tiktoken", "anywidget", "ipywidgets", "IPython", "pydantic", "mcp"} & mods


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
    assert not {"IPython", "ipykernel", "anthropic", "anywidget", "ipywidgets", "mcp"} & mods
    assert "flue_nb.notebook" not in mods
