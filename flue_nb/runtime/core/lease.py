"""Holding a conversation's lease: acquiring it, taking it from a dead owner, heartbeats.

One owner writes to a conversation at a time (contract 11.1). The keeper renews the lease while
work runs, notices when another owner took it over (the conversation then stops its run), and
polls the running submission's abort intent so an abort recorded elsewhere stops it promptly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from flue_nb.runtime import events as ev
from flue_nb.runtime.core.owner import provably_dead
from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.events import EventBus
from flue_nb.runtime.store import Store

__all__ = ["LeaseKeeper"]

log = logging.getLogger("flue_nb")


class LeaseKeeper:
    """The lease of one conversation, held by one owner in this process."""

    def __init__(
        self,
        store: Store,
        conversation_id: str,
        owner: str,
        *,
        ttl: float,
        bus: EventBus,
        on_lost: Callable[[], None],
        on_beat: Callable[[], None],
    ) -> None:
        self.store = store
        self.cid = conversation_id
        self.owner = owner
        self.ttl = ttl
        self.bus = bus
        self.on_lost = on_lost
        """Called once when another owner took the lease over: stop the local run."""
        self.on_beat = on_beat
        """Called about every second while the lease is held (the abort poll)."""
        self.lost = False
        self._heartbeat: asyncio.Task[None] | None = None

    def acquire(self) -> bool:
        """Take the lease if it is free, ours, expired, or held by a provably dead owner."""
        return self.store.acquire_lease(self.cid, self.owner, ttl=self.ttl) or self._take_over()

    async def own(self, work_remains: Callable[[], bool]) -> bool:
        """Hold the lease, waiting while another owner has it and work remains; start beating."""
        while True:
            if self.acquire():
                if self._heartbeat is None or self._heartbeat.done():
                    self._heartbeat = asyncio.ensure_future(self._beat())
                return True
            if not work_remains():
                return False
            await asyncio.sleep(min(1.0, self.ttl / 10))

    def stop_beating(self) -> None:
        """Stop renewing (the worker is done)."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    def _take_over(self) -> bool:
        """Take the lease at once from an owner proved dead (same host, process gone), instead
        of waiting out its TTL with nothing to show (issue 12.8)."""
        held = self.store.lease(self.cid)
        if held is None or not provably_dead(held[0]):
            return False
        if not self.store.acquire_lease(self.cid, self.owner, ttl=self.ttl, replacing=held[0]):
            return False
        self.bus.publish(
            ev.Log(
                kind="lease_taken_over",
                message=f"took over from {held[0]}, whose process is gone, without waiting for its claim to lapse",
            )
        )
        return True

    async def _beat(self) -> None:
        every = self.ttl / 3
        poll = min(1.0, every)
        due = every
        while True:
            await asyncio.sleep(poll)
            self.on_beat()
            due -= poll
            if due > 1e-9:
                continue
            due = every
            try:
                renewed = self.store.renew_lease(self.cid, self.owner, ttl=self.ttl)
            except StoreError as exc:  # try again at the next beat; the worker meets it too
                log.warning("flue_nb: could not renew the lease on conversation %r: %s", self.cid, exc.message)
                continue
            if not renewed:
                # Another owner recovered the conversation while we were stalled: stop writing.
                # The store refuses our writes too (they are fenced by owner); this stops the work.
                log.warning("flue_nb: lost the lease on conversation %r; stopping the local run", self.cid)
                self.lost = True
                self.on_lost()
                return
