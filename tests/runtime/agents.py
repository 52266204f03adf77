"""Small helpers for driving real agents with offline models in tests."""

from __future__ import annotations

import threading
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


def wait_for_event(s: Any, type_: str, timeout: float = 10.0) -> Callable[[], None]:
    """Block until the session emits an event of `type_` (returns a callable to wait)."""
    seen = threading.Event()
    stop = s.observe(lambda e: seen.set() if e.type == type_ else None)

    def wait() -> None:
        assert seen.wait(timeout), f"no {type_} event within {timeout}s"
        stop()

    return wait
