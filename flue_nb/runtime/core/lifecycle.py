"""Lifecycle hooks run exactly once: each callback's completion is recorded like a durable step.

The record commits after the callback returns, so a crash while one runs (or in the instant
between its return and the commit) runs it again, as a durable tool's step would; a callback whose
completion was recorded is never called again by the recovering owner: it gets the recorded value
instead. `finish` also runs for a submission settled before it ran (aborted while queued): its
agent is rendered to learn its callbacks.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.core.transcript import Recorder
from flue_nb.runtime.errors import AgentError, FlueError, raised_at
from flue_nb.runtime.events import ErrorInfo

__all__ = ["AgentFinish", "Lifecycle", "finish"]


@dataclass(frozen=True, slots=True)
class AgentFinish:
    """What `use_agent_finish` callbacks receive: how the submission settled."""

    submission_id: str
    outcome: str
    """`completed`, `failed` or `aborted`."""
    result: str | None = None
    error: ErrorInfo | None = None


class Lifecycle:
    """The lifecycle callbacks of one submission (or one task), recorded under one step key."""

    def __init__(self, recorder: Recorder, key: str, agent: str) -> None:
        self._recorder = recorder
        self._key = f"lifecycle:{key}"
        self._agent = agent
        self._done: dict[str, Any] | None = None

    def recorded(self, name: str) -> bool:
        """True when the callbacks of `name` ran (in this process or one before it)."""
        return any(k == name or k.startswith(f"{name}#") for k in self._steps())

    def _steps(self) -> dict[str, Any]:
        if self._done is None:  # read once: the store scan is not free, and only we add to it
            self._done = self._recorder.steps(self._key)
        return self._done

    async def run(self, name: str, moment: str, fns: Sequence[Callable[..., Any]], *args: Any) -> list[Any]:
        """Call each of `fns` not yet recorded under `name`; return every callback's value."""
        done = self._steps()
        values = []
        for i, fn in enumerate(fns):
            step = f"{name}#{i}"
            if step in done:
                values.append(done[step])
                continue
            value = await _call(fn, moment, self._agent, *args)
            # JSON-safe, as the store keeps it: the recovering owner reads back the same value.
            stored = json.loads(json.dumps(dict(value), default=str)) if isinstance(value, Mapping) else None
            self._recorder.step(self._key, step, stored)
            done[step] = stored
            values.append(stored)
        return values


async def _call(fn: Callable[..., Any], moment: str, agent: str, *args: Any) -> Any:
    try:
        value = fn(*args)
        if inspect.isawaitable(value):
            value = await value
    except FlueError:
        raise
    except Exception as exc:
        name = getattr(fn, "__qualname__", repr(fn))
        raise AgentError(
            f"the `use_{moment}` callback `{name}` of agent `{agent}` raised "
            f"{type(exc).__name__}: {exc}{raised_at(exc)}",
            agent=agent,
        ) from exc
    if value is not None and moment == "response_finish" and not isinstance(value, Mapping):
        raise AgentError(
            f"the `use_response_finish` callback `{getattr(fn, '__qualname__', fn)}` of agent `{agent}` "
            f"returned {type(value).__name__}; return a mapping (merged into the response's metadata) or nothing",
            agent=agent,
        )
    return value


_SETTLES = {"completed": "completed", "aborted": "aborted", "failed": "failed", "timeout": "failed"}


async def finish(recorder: Recorder, sid: str, agent: Any, decision: Any, run: Any, state: dict[str, Any]) -> Any:
    """Run the `use_agent_finish` callbacks of a submission about to settle (once, ever).

    Returns the decision to settle with: a callback that raised turns a completed submission
    into a failed one with its `agent_error` (a failure keeps its own error).
    """
    outcome = _SETTLES.get(decision.kind)
    if outcome is None:
        return decision
    rendered = _rendered_for(run, sid, agent, state)
    fns = (rendered.lifecycle.get("agent_finish") if rendered is not None else None) or []
    if not fns:
        return decision
    err = decision.error
    done = AgentFinish(sid, outcome, decision.result, ErrorInfo(err.type, err.message) if err is not None else None)
    try:
        await Lifecycle(recorder, sid, agent.name).run("agent_finish", "agent_finish", fns, done)
    except FlueError as exc:
        if outcome != "completed":
            return decision
        return type(decision)("failed", error=exc)
    return decision


def _rendered_for(run: Any, sid: str, agent: Any, state: dict[str, Any]) -> Any:
    """What the agent declared for `sid`: its run's last render, or a fresh one (None if it fails)."""
    if run is not None and run.submission_id == sid and run.rendered is not None:
        return run.rendered
    from flue_nb.runtime.agent.hooks import render

    try:
        return render(agent, state=state)
    except FlueError:
        return None
