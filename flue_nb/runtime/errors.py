"""The exception tree of flue_nb, each class with a stable `type` code (contract 16).

    FlueError
    ├── ConfigError                      developer misuse, raised before or outside a run
    │   ├── HookError                    a hook called wrongly (outside a render, twice, ...)
    │   ├── AgentError                   agent_error (the agent function itself raised)
    │   ├── ToolNameConflictError        tool_name_conflict
    │   ├── NoSandboxError               no_sandbox
    │   ├── ModelNotConfiguredError      model_not_configured
    │   ├── CassetteDriftError           cassette_drift (a replay differs from its recording)
    │   └── McpConnectionError           mcp_connection_failed
    ├── ToolInputValidationError         tool_input_validation (becomes an error result)
    ├── StoreError                       store_error
    │   └── SessionBusyError             session_busy
    └── RunError                         a run could not finish
        ├── ProviderError                provider_error (has a `kind`; `transient` says retry)
        │   ├── ProviderHTTPError        provider_http_error (has a `status`)
        │   └── ContextOverflowError     context_overflow
        ├── ModelRefusedError            model_refused (the model declined; the API says why)
        ├── PolicyDeniedError            policy_denied (the hub policy forbids it; names the policy)
        ├── SandboxError                 sandbox_error
        │   └── SandboxTimeoutError      sandbox_timeout
        ├── LimitExceeded                limit_exceeded
        │   ├── DelegationDepthExceededError   delegation_depth_exceeded
        │   ├── TurnLimitExceededError   turn_limit_exceeded
        │   └── BudgetExceededError      budget_exceeded
        ├── SubmissionAbortedError       submission_aborted
        ├── SubmissionTimeoutError       submission_timeout
        ├── SubmissionRetryExhaustedError    submission_retry_exhausted
        └── InternalError                internal_error (a bug in flue_nb; the submission still settles)

Every class has its own code; `error_from_dict` looks codes up in one explicit table, so a
stored error always comes back as the class that `except flue_nb.<TheError>` catches.

`ToolRetry` is not an error of ours: tool code raises it to send a message back to the model.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from flue_nb.runtime.redact import redact, redact_value, secret_values

__all__ = [
    "AgentError",
    "BudgetExceededError",
    "CassetteDriftError",
    "ConfigError",
    "ContextOverflowError",
    "DelegationDepthExceededError",
    "FlueError",
    "HookError",
    "InternalError",
    "LimitExceeded",
    "McpConnectionError",
    "ModelNotConfiguredError",
    "ModelRefusedError",
    "NoSandboxError",
    "PolicyDeniedError",
    "ProviderError",
    "ProviderErrorKind",
    "ProviderHTTPError",
    "RunError",
    "SandboxError",
    "SandboxTimeoutError",
    "SessionBusyError",
    "StoreError",
    "SubmissionAbortedError",
    "SubmissionRetryExhaustedError",
    "SubmissionTimeoutError",
    "ToolInputValidationError",
    "ToolNameConflictError",
    "ToolRetry",
    "TurnLimitExceededError",
    "error_from_dict",
    "raised_at",
]


MAX_STORED_MESSAGE = 4000
"""Characters of an error's message kept when it is stored with a submission."""


class FlueError(Exception):
    """Root of every error flue_nb raises."""

    type: ClassVar[str] = "flue_error"

    def __init__(self, message: str, **details: Any) -> None:
        # The one place every error's words pass (issue 20.2): what a tool, an agent function, a
        # server's stderr or a provider's body quoted is stored, shown and logged redacted.
        pairs = secret_values()
        message = redact(message, pairs)
        super().__init__(message)
        self.message = message
        #: Structured, JSON-safe facts about the error (never a stack trace).
        self.details: dict[str, Any] = redact_value(details, pairs)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored with a settlement: type, message (capped) and details."""
        message = self.message
        if len(message) > MAX_STORED_MESSAGE:  # e.g. a provider's multi-megabyte error body
            message = f"{message[:MAX_STORED_MESSAGE]}… [{len(message) - MAX_STORED_MESSAGE:,} more characters]"
        return {"type": self.type, "message": message, **({"details": self.details} if self.details else {})}


class ConfigError(FlueError):
    """The developer used the API wrongly; fix the code, not the run."""

    type = "config_error"


class HookError(ConfigError):
    """A hook was called outside a render, twice, or where it is not allowed."""

    type = "hook_error"


class AgentError(ConfigError):
    """The agent function (or a hook's callback) raised: the author's code, named with its line.

    A `ConfigError`: the function raises again at every render, so the submission fails at
    once instead of retrying.
    """

    type = "agent_error"


def raised_at(exc: BaseException) -> str:
    """` at FILE, line N, in FUNC: CODE` for the frame that raised `exc` ("" with no traceback)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    code = f": {last.line.strip()}" if last.line else ""
    return f" at {last.filename}, line {last.lineno}, in {last.name}{code}"


class ToolNameConflictError(ConfigError):
    """Two tools share a name, or a custom tool takes a reserved one (contract 1.4)."""

    type = "tool_name_conflict"


class NoSandboxError(ConfigError):
    """The agent has no sandbox attached (contract 9.2)."""

    type = "no_sandbox"


class ModelNotConfiguredError(ConfigError):
    """No model is configured, or its provider has no credentials."""

    type = "model_not_configured"


class McpConnectionError(ConfigError):
    """An MCP server named by `use_mcp()` could not be started, reached or initialised.

    A `ConfigError`: retrying the attempt would not start a server whose command or URL is
    wrong, so the submission fails at once, before the model runs (pass `optional=True` to run
    without the server instead).
    """

    type = "mcp_connection_failed"


class CassetteDriftError(ConfigError):
    """A replayed request differs from the recorded one, or the cassette ran out."""

    type = "cassette_drift"


class ToolInputValidationError(FlueError):
    """Tool input failed its schema; the model sees it as an error result (contract 1.6)."""

    type = "tool_input_validation"


class StoreError(FlueError):
    """The durable store failed or holds something it cannot read."""

    type = "store_error"


class SessionBusyError(StoreError):
    """Another owner holds the conversation, or a run is in progress."""

    type = "session_busy"


class RunError(FlueError):
    """A run could not finish."""

    type = "run_error"


ProviderErrorKind = Literal[
    "overloaded",
    "rate_limit",
    "server",
    "connection",
    "timeout",
    "context_overflow",
    "auth",
    "bad_request",
    "other",
]

_TRANSIENT: frozenset[str] = frozenset({"overloaded", "rate_limit", "server", "connection", "timeout"})


class ProviderError(RunError):
    """The model provider failed; `kind` classifies it, `transient` says whether to retry."""

    type = "provider_error"

    def __init__(self, message: str, *, kind: ProviderErrorKind = "other", **details: Any) -> None:
        super().__init__(message, kind=kind, **details)
        self.kind: ProviderErrorKind = kind

    @property
    def transient(self) -> bool:
        """True for errors worth retrying with backoff (contract 11.3); `final=True` never is."""
        return self.kind in _TRANSIENT and not self.details.get("final")


class ProviderHTTPError(ProviderError):
    """The provider answered with an HTTP error status."""

    type = "provider_http_error"

    def __init__(self, message: str, *, status: int, kind: ProviderErrorKind = "other", **details: Any) -> None:
        super().__init__(message, kind=kind, status=status, **details)
        self.status = status


class ContextOverflowError(ProviderError):
    """The provider said the prompt is too long for the model's window."""

    type = "context_overflow"

    def __init__(self, message: str, **details: Any) -> None:
        details.pop("kind", None)
        super().__init__(message, kind="context_overflow", **details)


class ModelRefusedError(RunError):
    """The model declined to answer (stop reason `refusal`): `category` and `explanation` are
    the API's, when it gave them. Final: asking again would be refused again."""

    type = "model_refused"


class PolicyDeniedError(RunError):
    """The hub policy forbids it: a model it does not list, an MCP server, a spending limit.

    Final: another attempt would be refused the same way. The message names the policy file.
    """

    type = "policy_denied"


class SandboxError(RunError):
    """The sandbox failed to do what a tool asked."""

    type = "sandbox_error"


class SandboxTimeoutError(SandboxError):
    """A sandbox command ran past its timeout."""

    type = "sandbox_timeout"


class LimitExceeded(RunError):
    """A runtime limit was hit."""

    type = "limit_exceeded"


class DelegationDepthExceededError(LimitExceeded):
    """A task chain went deeper than the delegation limit (contract 14.1)."""

    type = "delegation_depth_exceeded"


class TurnLimitExceededError(LimitExceeded):
    """A submission made more model calls than its turn limit allows (`max_turns`).

    Final: a runaway loop would only run away again, so the submission settles `failed`
    without another attempt.
    """

    type = "turn_limit_exceeded"


class BudgetExceededError(LimitExceeded):
    """A submission spent its budget (`max_cost_usd`, or its token limits) before its next model call.

    Final, like the turn limit: another attempt would only spend more.
    """

    type = "budget_exceeded"


class SubmissionAbortedError(RunError):
    """The submission was aborted."""

    type = "submission_aborted"


class SubmissionTimeoutError(RunError):
    """The submission ran past its timeout (contract 11.4)."""

    type = "submission_timeout"


class SubmissionRetryExhaustedError(RunError):
    """The submission used up its attempts (contract 11.4)."""

    type = "submission_retry_exhausted"


class InternalError(RunError):
    """A bug in flue_nb itself; the submission settles `failed` with it instead of hanging."""

    type = "internal_error"


class ToolRetry(Exception):
    """Raised by tool code to hand `message` back to the model as an error result."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


ERROR_TYPES: dict[str, type[FlueError]] = {
    cls.type: cls
    for cls in (
        FlueError,
        ConfigError,
        HookError,
        AgentError,
        ToolNameConflictError,
        NoSandboxError,
        ModelNotConfiguredError,
        McpConnectionError,
        CassetteDriftError,
        ToolInputValidationError,
        StoreError,
        SessionBusyError,
        RunError,
        ProviderError,
        ProviderHTTPError,
        ContextOverflowError,
        ModelRefusedError,
        PolicyDeniedError,
        SandboxError,
        SandboxTimeoutError,
        LimitExceeded,
        DelegationDepthExceededError,
        TurnLimitExceededError,
        BudgetExceededError,
        SubmissionAbortedError,
        SubmissionTimeoutError,
        SubmissionRetryExhaustedError,
        InternalError,
    )
}
"""Type code → class: the one table `error_from_dict` reads (a test checks codes are unique)."""


def error_from_dict(data: dict[str, Any]) -> FlueError:
    """Rebuild an error stored by `FlueError.to_dict` (unknown types become a plain `RunError`)."""
    cls = ERROR_TYPES.get(data.get("type", ""), RunError)
    err = cls.__new__(cls)
    FlueError.__init__(err, data.get("message", ""), **data.get("details", {}))
    if isinstance(err, ProviderError):
        err.kind = err.details.get("kind", "other")
    if isinstance(err, ProviderHTTPError):
        err.status = err.details.get("status", 0)
    if cls is RunError and data.get("type") not in (None, "run_error"):
        err.details["original_type"] = data.get("type")
    return err
