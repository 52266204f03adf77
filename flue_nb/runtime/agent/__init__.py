"""Agents are functions: `@agent` marks one, `define_subagent` names one for delegation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from flue_nb.runtime.agent.limits import Limits, check_limits
from flue_nb.runtime.errors import ConfigError

__all__ = ["AgentDef", "AgentLike", "SubagentDef", "agent", "as_agent", "check_max_turns", "define_subagent"]


@dataclass(frozen=True, slots=True)
class AgentDef:
    """An agent function. Calling it outside a render is meaningless; the runtime renders it."""

    fn: Callable[[], Any]
    name: str
    max_attempts: int = 10
    """Attempts a submission may take before it settles `failed` (contract 11.1)."""
    timeout: float = 3600.0
    """Seconds from the first attempt's start before a submission settles `failed`."""
    max_turns: int = 100
    """Model calls a submission may make (its subagents' count separately) before it settles
    `failed` with `turn_limit_exceeded`; a cell may set its own (`%%flue --max-turns N`)."""
    max_cost_usd: float | None = None
    """Dollars (list prices) a submission may spend, its subagents included, before it settles
    `failed` with `budget_exceeded`; a cell may set its own (`%%flue --max-cost USD`)."""
    max_input_tokens: int | None = None
    """Prompt tokens a submission may send over all its model calls (for models without a price)."""
    max_output_tokens: int | None = None
    """Output tokens a submission may receive over all its model calls."""

    @property
    def limits(self) -> Limits:
        """This agent's spending limits."""
        return Limits(self.max_cost_usd, self.max_input_tokens, self.max_output_tokens)

    def __call__(self) -> Any:
        return self.fn()


AgentLike = Union[AgentDef, Callable[[], Any]]


def agent(
    fn: Callable[[], Any] | None = None,
    *,
    name: str | None = None,
    max_attempts: int = 10,
    timeout: float = 3600.0,
    max_turns: int = 100,
    max_cost_usd: float | None = None,
    max_input_tokens: int | None = None,
    max_output_tokens: int | None = None,
) -> Any:
    """Mark a function as an agent; it re-renders (runs its hooks) before every model call."""
    if not isinstance(max_attempts, int) or max_attempts < 1:
        raise ConfigError(f"max_attempts must be a positive int, got {max_attempts!r}")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
    check_max_turns(max_turns)
    budget = check_limits(
        max_cost_usd=max_cost_usd, max_input_tokens=max_input_tokens, max_output_tokens=max_output_tokens
    )

    def wrap(f: Callable[[], Any]) -> AgentDef:
        if not callable(f):
            raise ConfigError(f"@agent needs a function, got {type(f).__name__}")
        return AgentDef(
            f, name or str(getattr(f, "__name__", "agent")), max_attempts, float(timeout), max_turns, **budget
        )

    return wrap(fn) if fn is not None else wrap


def check_max_turns(max_turns: object) -> int:
    """`max_turns` if it is a positive int, else `ConfigError`."""
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ConfigError(f"max_turns must be a positive int (model calls per submission), got {max_turns!r}")
    return max_turns


def as_agent(value: AgentLike) -> AgentDef:
    """Accept an `@agent` function or a plain function and return an AgentDef."""
    if isinstance(value, AgentDef):
        return value
    if callable(value):
        return AgentDef(value, getattr(value, "__name__", "agent"))
    raise ConfigError(f"expected an @agent function, got {type(value).__name__}: {value!r}")


@dataclass(frozen=True, slots=True)
class SubagentDef:
    """A named agent the model can delegate to with the `task` tool."""

    name: str
    description: str
    agent: AgentDef
    model: Any = None
    """A model spec or Model; None inherits the parent's model (contract 14.2)."""


def define_subagent(name: str, description: str, *, agent: AgentLike, model: Any = None) -> SubagentDef:
    """Declare a subagent for `use_subagent`."""
    if not name or not name.replace("-", "_").isidentifier():
        raise ConfigError(f"subagent name {name!r} must be a non-empty identifier (letters, digits, _ or -)")
    if not description:
        raise ConfigError(f"subagent {name!r} needs a description: the model chooses by it")
    return SubagentDef(name, description, as_agent(agent), model)
