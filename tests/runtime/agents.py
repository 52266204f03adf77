"""Small helpers for driving real agents with offline models in tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flue_nb as flue
from flue_nb.runtime.core.loop import RunSettings


class Sleeps:
    """An injectable sleep that records delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def make_agent(
    model: Any,
    *,
    sandbox: Any = None,
    tools: tuple[Any, ...] = (),
    instructions: str = "You are a test agent.",
    extra: Callable[[], None] | None = None,
    **agent_kw: Any,
) -> Any:
    """An @agent with the given model, optional sandbox and tools."""

    @flue.agent(**agent_kw)
    def test_agent() -> str:
        flue.use_model(model)
        if sandbox is not None:
            flue.use_sandbox(sandbox)
        for t in tools:
            flue.use_tool(t)
        if extra is not None:
            extra()
        return instructions

    return test_agent


def session(agent: Any, *, sleeps: Sleeps | None = None, db: Any = ":memory:", **kw: Any) -> Any:
    """A session on an in-memory store with instant sleeps."""
    settings = RunSettings(sleep=sleeps or Sleeps())
    return flue.init(agent, db=db, settings=settings, **kw)
