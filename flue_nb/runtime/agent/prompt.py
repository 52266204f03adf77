"""Context composition (contract 12): the frozen system prompt, rosters, and the signals that
narrate changes to the model instead of rewriting the prompt."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.agent import SubagentDef
from flue_nb.runtime.agent.skills import Skill
from flue_nb.runtime.messages import SignalMessage
from flue_nb.runtime.text import clean
from flue_nb.runtime.tools.tool import Tool

__all__ = ["Environment", "compose_system", "describe_environment", "diff_roster", "make_roster"]

LISTING_LIMIT = 200
AGENTS_MD_LIMIT = 51_200


@dataclass(frozen=True, slots=True)
class Environment:
    """What the prompt says about an attached sandbox."""

    cwd: str
    listing: tuple[str, ...]
    agents_md: str | None
    notes: str = ""
    """What the sandbox says about its own tools (`prompt_notes()`: the kernel's notebook tools)."""


async def describe_environment(sandbox: Any) -> Environment:
    """Read the working directory, its top-level listing and AGENTS.md from the sandbox."""
    cwd = sandbox.cwd
    try:
        entries = await sandbox.list_dir(cwd)
        listing = tuple(e.name + ("/" if e.kind == "dir" else "") for e in entries)
    except OSError:
        listing = ()
    agents_md = None
    try:
        raw = await sandbox.read_file(os.path.join(cwd, "AGENTS.md"))
        agents_md = raw[:AGENTS_MD_LIMIT].decode("utf-8", "replace")
    except OSError:
        pass
    notes = getattr(sandbox, "prompt_notes", None)
    return Environment(cwd, listing, agents_md, notes() if callable(notes) else "")


def _listing_text(listing: Sequence[str]) -> str:
    shown = list(listing[:LISTING_LIMIT])
    if len(listing) > LISTING_LIMIT:
        shown.append(f"... and {len(listing) - LISTING_LIMIT} more entries")
    return "\n".join(shown) if shown else "(empty)"


def _roster_lines(skills: Sequence[Skill], subagents: Sequence[SubagentDef]) -> list[str]:
    out = []
    if skills:
        out.append("## Skills\nActivate a skill with `activate_skill` to get its full instructions.")
        out.extend(f"- {s.name}: {s.description}" for s in skills)
    if subagents:
        out.append("## Subagents\nDelegate work with the `task` tool, naming one of these agents.")
        out.extend(f"- {s.name}: {s.description}" for s in subagents)
    return out


def compose_system(
    instructions: Sequence[str],
    env: Environment | None,
    skills: Sequence[Skill],
    subagents: Sequence[SubagentDef],
) -> str:
    """Compose the system prompt: instructions, then the workspace, then the rosters (12.1)."""
    parts = [i.strip() for i in instructions if i and i.strip()]
    if env is not None:
        parts.append(f"## Workspace\nWorking directory: {env.cwd}\nTop-level entries:\n{_listing_text(env.listing)}")
        if env.agents_md:
            parts.append(f"## AGENTS.md\n{env.agents_md.strip()}")
        if env.notes:
            parts.append(env.notes.strip())
    roster = _roster_lines(skills, subagents)
    if roster:
        parts.append("\n".join(roster))
    # The workspace listing may name files that are not UTF-8: escape them (runtime._text).
    return clean("\n\n".join(parts))


def _digest(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def make_roster(
    tools: Sequence[Tool], skills: Sequence[Skill], subagents: Sequence[SubagentDef], cwd: str | None
) -> dict[str, Any]:
    """A JSON-safe snapshot of what the model has: compared at every turn boundary."""
    return {
        "sandbox": cwd,
        "tools": {t.name: t.fingerprint() for t in tools},
        "skills": {s.name: _digest([s.description, s.instructions]) for s in skills},
        "subagents": {s.name: _digest(s.description) for s in subagents},
    }


def _names(d: dict[str, str]) -> str:
    return ", ".join(f"`{n}`" for n in d) or "(none)"


def _full_roster_text(roster: dict[str, Any]) -> str:
    return (
        f"Tools: {_names(roster['tools'])}\n"
        f"Skills: {_names(roster['skills'])}\n"
        f"Subagents: {_names(roster['subagents'])}"
    )


def diff_roster(old: dict[str, Any] | None, new: dict[str, Any]) -> list[SignalMessage]:
    """The signals that tell the model what changed between two rosters (12.2, 9.3)."""
    if old is None or old == new:
        return []
    if old.get("sandbox") != new.get("sandbox"):
        if new["sandbox"] is None:
            where = "The sandbox was detached: there is no working directory and no file or shell tools now."
        elif old.get("sandbox") is None:
            where = f"A sandbox was attached. Working directory: {new['sandbox']}"
        else:
            where = f"The sandbox changed. Working directory: {new['sandbox']}"
        text = (
            f"The environment changed. {where}\n{_full_roster_text(new)}\n"
            "Files and results from the previous environment may be gone; check before relying on them."
        )
        return [SignalMessage("environment", clean(text), [clean(where)])]  # cwd may not be UTF-8
    lines = []
    for kind in ("tools", "skills", "subagents"):
        before, after = old.get(kind, {}), new.get(kind, {})
        mounted = [n for n in after if n not in before]
        unmounted = [n for n in before if n not in after]
        changed = [n for n in after if n in before and before[n] != after[n]]
        label = kind[:-1]
        if mounted:
            lines.append(f"Mounted {label}s: " + ", ".join(f"`{n}`" for n in mounted))
        if unmounted:
            lines.append(f"Unmounted {label}s: " + ", ".join(f"`{n}`" for n in unmounted))
        if changed:
            lines.append(f"Changed {label}s: " + ", ".join(f"`{n}`" for n in changed))
    if not lines:
        return []
    return [SignalMessage("resources", "Your resources changed.\n" + "\n".join(lines), lines)]
