"""flue_nb: a tool-using agent inside your live Jupyter kernel, durable in SQLite.

Names load lazily so `import flue_nb` (and `%load_ext flue_nb`) stays light: the SDK, tiktoken
and the widget are imported only when used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "AgentDef": "flue_nb.runtime.agent",
    "AgentEnd": "flue_nb.runtime.events",
    "AgentError": "flue_nb.runtime.errors",
    "AgentStart": "flue_nb.runtime.events",
    "BudgetExceededError": "flue_nb.runtime.errors",
    "CompactionConfig": "flue_nb.runtime.agent.settings",
    "CompactionEnd": "flue_nb.runtime.events",
    "CompactionStart": "flue_nb.runtime.events",
    "ConfigError": "flue_nb.runtime.errors",
    "ContextOverflowError": "flue_nb.runtime.errors",
    "DelegationDepthExceededError": "flue_nb.runtime.errors",
    "ErrorInfo": "flue_nb.runtime.events",
    "Event": "flue_nb.runtime.events",
    "FlueError": "flue_nb.runtime.errors",
    "HookError": "flue_nb.runtime.errors",
    "Idle": "flue_nb.runtime.events",
    "LimitExceeded": "flue_nb.runtime.errors",
    "Log": "flue_nb.runtime.events",
    "McpConnectionError": "flue_nb.runtime.errors",
    "MessageEnd": "flue_nb.runtime.events",
    "MessageStart": "flue_nb.runtime.events",
    "ModelNotConfiguredError": "flue_nb.runtime.errors",
    "ModelRefusedError": "flue_nb.runtime.errors",
    "NoSandboxError": "flue_nb.runtime.errors",
    "PolicyDeniedError": "flue_nb.runtime.errors",
    "ProviderError": "flue_nb.runtime.errors",
    "ProviderHTTPError": "flue_nb.runtime.errors",
    "Receipt": "flue_nb.runtime.session",
    "RunError": "flue_nb.runtime.errors",
    "SandboxError": "flue_nb.runtime.errors",
    "SandboxTimeoutError": "flue_nb.runtime.errors",
    "Session": "flue_nb.runtime.session",
    "SessionBusyError": "flue_nb.runtime.errors",
    "Signal": "flue_nb.runtime.events",
    "StoreError": "flue_nb.runtime.errors",
    "SubmissionAbortedError": "flue_nb.runtime.errors",
    "SubmissionQueued": "flue_nb.runtime.events",
    "SubmissionRecovery": "flue_nb.runtime.events",
    "SubmissionRetryExhaustedError": "flue_nb.runtime.errors",
    "SubmissionRunning": "flue_nb.runtime.events",
    "SubmissionSettled": "flue_nb.runtime.events",
    "SubmissionTimeoutError": "flue_nb.runtime.errors",
    "TaskEnd": "flue_nb.runtime.events",
    "TaskStart": "flue_nb.runtime.events",
    "TextDelta": "flue_nb.runtime.events",
    "ThinkingDelta": "flue_nb.runtime.events",
    "Tool": "flue_nb.runtime.tools.tool",
    "ToolCallInfo": "flue_nb.runtime.events",
    "ToolContext": "flue_nb.runtime.tools.tool",
    "ToolEnd": "flue_nb.runtime.events",
    "ToolInputValidationError": "flue_nb.runtime.errors",
    "ToolNameConflictError": "flue_nb.runtime.errors",
    "ToolOutput": "flue_nb.runtime.tools.tool",
    "ToolRetry": "flue_nb.runtime.errors",
    "ToolStart": "flue_nb.runtime.events",
    "TurnEnd": "flue_nb.runtime.events",
    "TurnLimitExceededError": "flue_nb.runtime.errors",
    "TurnStart": "flue_nb.runtime.events",
    "agent": "flue_nb.runtime.agent",
    "chat": "flue_nb.notebook.views.chat",
    "define_subagent": "flue_nb.runtime.agent",
    "define_tool": "flue_nb.runtime.tools.tool",
    "init": "flue_nb.runtime.session",
    "instrument": "flue_nb.runtime.tracing",
    "kernel": "flue_nb.notebook.kernel.sandbox",
    "local": "flue_nb.runtime.sandbox.local",
    "serve": "flue_nb.notebook.serve",
    "tool": "flue_nb.runtime.tools.tool",
    "use_agent_finish": "flue_nb.runtime.agent.hooks",
    "use_agent_start": "flue_nb.runtime.agent.hooks",
    "use_instruction": "flue_nb.runtime.agent.hooks",
    "use_mcp": "flue_nb.runtime.agent.hooks",
    "use_model": "flue_nb.runtime.agent.hooks",
    "use_persistent_state": "flue_nb.runtime.agent.hooks",
    "use_response_finish": "flue_nb.runtime.agent.hooks",
    "use_response_start": "flue_nb.runtime.agent.hooks",
    "use_sandbox": "flue_nb.runtime.agent.hooks",
    "use_skill": "flue_nb.runtime.agent.hooks",
    "use_subagent": "flue_nb.runtime.agent.hooks",
    "use_tool": "flue_nb.runtime.agent.hooks",
}

__all__ = sorted([*_EXPORTS, "load_ipython_extension", "unload_ipython_extension"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'flue_nb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext flue_nb`: register the `%flue` magics (imported only now)."""
    from flue_nb.notebook.magics.extension import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """`%unload_ext flue_nb`."""
    from flue_nb.notebook.magics.extension import unload_ipython_extension as unload

    unload(ipython)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only (names re-exported lazily)
    from flue_nb.notebook.kernel.sandbox import kernel
    from flue_nb.notebook.views.chat import chat
    from flue_nb.runtime.agent import AgentDef, agent, define_subagent
    from flue_nb.runtime.agent.hooks import (
        use_instruction,
        use_mcp,
        use_model,
        use_persistent_state,
        use_sandbox,
        use_skill,
        use_subagent,
        use_tool,
    )
    from flue_nb.runtime.agent.settings import CompactionConfig
    from flue_nb.runtime.errors import *  # noqa: F403
    from flue_nb.runtime.events import (
        AgentEnd,
        AgentStart,
        CompactionEnd,
        CompactionStart,
        ErrorInfo,
        Event,
        Idle,
        Log,
        MessageEnd,
        MessageStart,
        Signal,
        SubmissionQueued,
        SubmissionRecovery,
        SubmissionRunning,
        SubmissionSettled,
        TaskEnd,
        TaskStart,
        TextDelta,
        ThinkingDelta,
        ToolCallInfo,
        ToolEnd,
        ToolStart,
        TurnEnd,
        TurnStart,
    )
    from flue_nb.runtime.sandbox.local import local
    from flue_nb.runtime.session import Receipt, Session, init
    from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput, define_tool, tool
