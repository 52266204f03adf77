"""The agent a submission was admitted with, rebuilt from its stored settings when they differ.

A submission stores the settings it was admitted with (agent name, model, approval, …), so a
recovering kernel that admits with other settings still runs it as it was asked, when it can
rebuild that agent; when it cannot, it says so in the stream and runs with its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from flue_nb.runtime import events as ev
from flue_nb.runtime.agent import AgentDef
from flue_nb.runtime.agent.limits import BUDGET_KEYS
from flue_nb.runtime.errors import FlueError
from flue_nb.runtime.store import Submission

__all__ = ["PER_SUBMISSION", "admitted_agent"]

log = logging.getLogger("flue_nb")

PER_SUBMISSION = frozenset(("max_turns", *BUDGET_KEYS))
"""Settings a message may bring for itself; they say nothing about which agent it was admitted with."""


def admitted_agent(
    sub: Submission,
    agent: AgentDef,
    admission: Mapping[str, Any],
    rebuild: Callable[[dict[str, Any]], AgentDef | None] | None,
    publish: Callable[[ev.Event], Any],
) -> AgentDef:
    """`agent`, unless `sub`'s stored settings differ from `admission` and `rebuild` makes theirs."""
    stored = {k: v for k, v in (sub.settings or {}).items() if k not in PER_SUBMISSION}
    current = {"agent": agent.name, **admission}
    if not stored or stored == {k: v for k, v in current.items() if k not in PER_SUBMISSION}:
        return agent
    rebuilt = None
    if rebuild is not None:
        try:
            rebuilt = rebuild(stored)
        except FlueError as exc:
            log.warning("flue_nb: cannot rebuild the agent of %s (%s)", sub.id, exc.message)
    if rebuilt is None:
        publish(
            ev.Log(
                submission_id=sub.id,
                kind="settings_not_restored",
                message=f"runs with {current} instead of the settings it was admitted with, {stored}: "
                "they could not be rebuilt in this kernel",
            )
        )
        return agent
    return rebuilt
