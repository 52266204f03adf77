"""Grants ("always allow this for this conversation"), kept with the conversation in its store.

A grant is a tool name and an `fnmatch` pattern over the call's summary argument (`*`: every
call of the tool). It is a `state` record of the conversation (`GRANTS`), so every kernel of the
conversation reads the same grants, `%flue status` lists them, and `revoke` takes them back.
Without a store (a bare run) they live in this process, per conversation id.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = ["GRANTS", "Grant", "grant", "grants", "revoke"]

GRANTS = "flue_nb.approval:grants"
"""The conversation state name the grants are kept under."""

_memory: dict[str, list[Grant]] = {}


@dataclass(frozen=True, slots=True)
class Grant:
    """Calls of `tool` whose summary argument matches `pattern` run without asking here."""

    tool: str
    pattern: str = "*"

    def describe(self) -> str:
        """`bash 'git push*'`, or `write (every call)`."""
        return f"{self.tool} (every call)" if self.pattern == "*" else f"{self.tool} {self.pattern!r}"


def grants(store: Any, conversation_id: str | None) -> list[Grant]:
    """The conversation's grants (none without a conversation; this process's without a store)."""
    if conversation_id is None:
        return []
    if store is None:
        return list(_memory.get(conversation_id, []))
    raw = store.state(conversation_id).get(GRANTS)
    out = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict) and isinstance(item.get("tool"), str):
            out.append(Grant(item["tool"], str(item.get("pattern") or "*")))
    return out


def grant(store: Any, conversation_id: str, tool: str, pattern: str = "*") -> list[Grant]:
    """Add a grant to the conversation (kept in its store); its grants after."""
    current = grants(store, conversation_id)
    new = Grant(tool, pattern or "*")
    if new not in current:
        current.append(new)
    _save(store, conversation_id, current)
    return current


def revoke(store: Any, conversation_id: str, tool: str | None = None, pattern: str | None = None) -> list[Grant]:
    """Take back the grants of `tool` (with `pattern`: that one only; no tool: all); those taken."""
    current = grants(store, conversation_id)
    gone = [g for g in current if (tool is None or g.tool == tool) and (pattern is None or g.pattern == pattern)]
    _save(store, conversation_id, [g for g in current if g not in gone])
    return gone


def _save(store: Any, conversation_id: str, items: list[Grant]) -> None:
    if store is None:
        _memory[conversation_id] = list(items)
        return
    now = time.time()
    store.ensure_conversation(conversation_id, now=now)
    value = [{"tool": g.tool, "pattern": g.pattern} for g in items]
    store.append(conversation_id, None, [("state", {"name": GRANTS, "value": value})], now=now)
