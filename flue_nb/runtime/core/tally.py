"""What `status()` and a chat's gauge need from a conversation's records, folded as they grow.

A fold reads only the records appended since it last looked, so a status costs the same at turn
10 and at turn 3,000. A process's first fold starts from the tally the store keeps
(`Store.tally`), not from the conversation's first record: whoever folds keeps the tally again
once `KEEP_EVERY` records were folded since it was last kept, and the process running the
conversation folds every `FOLD_EVERY` settlements (`settled`) even when nobody asks for a status.
So a fresh kernel opening a chat on 10,000 submissions folds a few hundred records, not 60,000
(issue 37). A kept tally is a cache of the records: one folded by another version of this fold,
or that priced a model of the conversation otherwise than `price_of` does now (a price added or
changed since), is not used, and the records are folded from the start again.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from flue_nb.runtime.core.task_record import step_response
from flue_nb.runtime.core.tokens import reported_context
from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.messages import AssistantMessage, Usage, message_from_dict
from flue_nb.runtime.providers import Spend, price_of
from flue_nb.runtime.store import Record, RecordKind, Store

__all__ = ["FOLD_EVERY", "KEEP_EVERY", "KINDS", "Tally", "folded", "settled"]

KEEP_EVERY = 200
"""Records folded since the kept tally after which the fold keeps its own (one small write)."""
FOLD_EVERY = 20
"""Settlements after which the conversation's runner folds, so an unwatched conversation (a
served kernel, a nightly notebook) keeps a tally too."""
KINDS: list[RecordKind] = ["message", "event", "step", "settlement"]
"""The kinds of record a tally reads."""
_VERSION = 1
"""Of what a kept tally holds and how it was folded: another one is folded again."""


@dataclass
class Tally:
    """What `status()` needs from the record stream, up to the record `seq`."""

    seq: int = 0
    """The last record folded in (records only ever append, in seq order per conversation)."""
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    used_tokens: int | None = None
    agent: str | None = None
    spend: Spend = field(default_factory=Spend)
    settled: dict[str, int] = field(default_factory=dict)
    """Settled submissions by outcome, from their settlement records (one each, contract 10.4)."""
    lost_calls: int = 0
    unreported: int = 0
    priced: dict[str, str] = field(default_factory=dict)
    """Each model whose responses `spend` counts -> the price they were counted at."""

    def _spend(self, model: str | None, usage: Usage) -> None:
        key = model or ""
        if key not in self.priced:
            self.priced[key] = _price_text(model)
        self.spend.add(model, usage)

    def fold(self, records: Iterable[Record]) -> int:
        """Fold `records` (those after `seq`, in order) in; how many there were."""
        n = 0
        for r in records:
            n += 1
            self.seq = max(self.seq, r.seq)
            if r.kind == "event":
                if "attempt" in r.data:
                    self.agent = str(r.data.get("agent"))
                elif isinstance(lost := r.data.get("lost_call"), dict):
                    # A call cut off or retried: its prompt was paid for (an estimate).
                    self.lost_calls += 1
                    if isinstance(usd := lost.get("usd"), (int, float)):
                        self.spend.usd = (self.spend.usd or 0.0) + float(usd)
            elif r.kind == "settlement":
                outcome = str(r.data.get("outcome"))
                self.settled[outcome] = self.settled.get(outcome, 0) + 1
            elif r.kind == "step":
                # A subagent's response, kept as a step of its `task` call: it is in the bill.
                if (
                    child := step_response(str(r.data.get("name") or ""), r.data.get("value"))
                ) is not None and child.usage is not None:
                    self._spend(child.priced_as or child.model, child.usage)
            elif r.kind == "message" and r.data.get("kind") == "assistant":
                m = message_from_dict(r.data)
                if isinstance(m, AssistantMessage):
                    self.model = m.model
                    self.used_tokens = reported_context(m)
                    if m.usage is not None:
                        self.usage = self.usage + m.usage
                        self._spend(m.priced_as or m.model, m.usage)
                    else:
                        self.unreported += 1
        return n

    def copy(self) -> Tally:
        """A copy that later folds do not change."""
        return dataclasses.replace(
            self, spend=dataclasses.replace(self.spend), settled=dict(self.settled), priced=dict(self.priced)
        )

    def to_dict(self) -> dict[str, Any]:
        """The tally as the store keeps it (its seq is kept beside it)."""
        u = self.usage
        return {
            "version": _VERSION,
            "priced": dict(self.priced),
            "usage": [u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens],
            "model": self.model,
            "used_tokens": self.used_tokens,
            "agent": self.agent,
            "usd": self.spend.usd,
            "unpriced": self.spend.unpriced,
            "settled": dict(self.settled),
            "lost_calls": self.lost_calls,
            "unreported": self.unreported,
        }

    @classmethod
    def from_dict(cls, seq: int, data: dict[str, Any]) -> Tally | None:
        """The kept tally, or None when another version folded it, it priced a model otherwise
        than `price_of` does now, or it is not one."""
        if data.get("version") != _VERSION:
            return None
        try:
            priced = {str(k): str(v) for k, v in data["priced"].items()}
            if any(_price_text(model or None) != text for model, text in priced.items()):
                return None
            usd = data["usd"]
            return cls(
                seq=int(seq),
                usage=Usage(*(int(x) for x in data["usage"])),
                model=data["model"],
                used_tokens=data["used_tokens"],
                agent=data["agent"],
                spend=Spend(None if usd is None else float(usd), int(data["unpriced"])),
                settled={str(k): int(v) for k, v in data["settled"].items()},
                lost_calls=int(data["lost_calls"]),
                unreported=int(data["unreported"]),
                priced=priced,
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def _price_text(model: str | None) -> str:
    """The price `price_of` gives `model` now, as a tally remembers it."""
    return repr(price_of(model)) if model else "None"


@dataclass
class _Folding:
    """One conversation's tally in this process, and what it knows of the kept one."""

    tally: Tally = field(default_factory=Tally)
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: bool = False
    """Whether the kept tally was looked for (once per process)."""
    unkept: int = 0
    """Records folded since the tally was last kept (or found kept)."""
    keeps: bool = True
    """False after the store refused to keep one (a read-only file): not tried again."""
    settlements: int = 0


_lock = threading.Lock()
_tallies: weakref.WeakKeyDictionary[Any, dict[str, _Folding]] = weakref.WeakKeyDictionary()
"""Each store's conversations' tallies, shared in-process: each `%flue chat` or `%flue status`
opens a new session, and a tally of its own would fold the records from the start again."""


def _folding(store: Store, conversation_id: str) -> _Folding:
    with _lock:
        return _tallies.setdefault(store, {}).setdefault(conversation_id, _Folding())


def folded(store: Store, conversation_id: str) -> Tally:
    """The conversation's tally now (a copy): the kept one, then the records after it."""
    f = _folding(store, conversation_id)
    with f.lock:
        if not f.started:
            f.started = True
            try:
                kept = store.tally(conversation_id)
            except StoreError:
                kept = None
            found = Tally.from_dict(*kept) if kept is not None else None
            if found is not None and found.seq > f.tally.seq:
                f.tally = found
        f.unkept += f.tally.fold(store.records(conversation_id, after_seq=f.tally.seq, kinds=KINDS))
        if f.unkept >= KEEP_EVERY and f.keeps:
            try:
                store.keep_tally(conversation_id, f.tally.seq, f.tally.to_dict())
            except StoreError:
                f.keeps = False  # a cache: the fold goes on without it
            f.unkept = 0
        return f.tally.copy()


def settled(store: Store, conversation_id: str) -> None:
    """A submission of the conversation settled here: fold every `FOLD_EVERY` of them."""
    f = _folding(store, conversation_id)
    with f.lock:
        f.settlements += 1
        if f.settlements < FOLD_EVERY:
            return
        f.settlements = 0
    try:
        folded(store, conversation_id)
    except StoreError:
        pass  # only a head start for the next process's status; the settlement stands
