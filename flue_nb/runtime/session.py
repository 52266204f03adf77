"""Sessions: `init(agent, conversation=..., db=...)` and the blocking and async ways to talk to one."""

from __future__ import annotations

import asyncio
import os
import queue
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.core.coordinator import coordinator
from flue_nb.runtime.agent import AgentLike, as_agent
from flue_nb.runtime.core.conversation import Conversation
from flue_nb.runtime.errors import ConfigError, SubmissionAbortedError, error_from_dict
from flue_nb.runtime.events import Event
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.messages import Message, message_from_dict
from flue_nb.runtime.store import Outcome, Store, Submission, SubmissionState

__all__ = ["Receipt", "Session", "init"]

_OWNER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
_registry_lock = threading.Lock()
_stores: dict[str, Store] = {}
_conversations: dict[tuple[int, str], Conversation] = {}


@dataclass(frozen=True, slots=True)
class Receipt:
    """Proof of admission: the submission is durable once you hold this (contract 10.1)."""

    submission_id: str
    accepted_at: float
    conversation_id: str


class Session:
    """A handle on one conversation. Methods are thread-safe; the work runs on the coordinator."""

    def __init__(self, conversation: Conversation) -> None:
        self._conv = conversation
        self._co = coordinator()
        # Startup reconciliation (11.1): work a dead owner left behind is recovered now, in
        # admission order, before anything new (the worker waits while a live owner holds it).
        if conversation.store.submissions(conversation.id, unsettled=True):
            self._co.call(conversation.kick)

    @property
    def conversation_id(self) -> str:
        """The conversation this session talks to."""
        return self._conv.id

    @property
    def store(self) -> Store:
        """The durable store behind the conversation."""
        return self._conv.store

    def __repr__(self) -> str:
        return f"<flue_nb Session conversation={self._conv.id!r} agent={self._conv.agent.name!r}>"

    # --- admission and outcomes ---------------------------------------------------------------

    def dispatch(self, message: str, *, images: Sequence[Any] = ()) -> Receipt:
        """Admit a message durably and return at once; it runs (or joins) in admission order.

        `images` are attached to the message: matplotlib figures, `IPython.display.Image`s, PIL
        images, image bytes or paths of PNG/JPEG/GIF/WebP files (scaled to the model's limits).
        """
        from flue_nb.runtime.images import image_from_object

        parts = [image_from_object(obj) for obj in images]
        sub = self._conv.admit(message, parts)
        self._co.call(self._conv.kick, sub)
        return Receipt(sub.id, sub.accepted_at, self._conv.id)

    def read(self, receipt: Receipt | str, *, timeout: float | None = None) -> str:
        """Wait for a submission's outcome: its reply, or the error it failed or aborted with."""
        sid = receipt.submission_id if isinstance(receipt, Receipt) else receipt
        fut = self._co.submit(self._settled(sid))
        try:
            sub = self._co.wait(fut, timeout)
        except KeyboardInterrupt:
            # Ctrl-C (or the kernel's stop button) aborts durably, then the interrupt goes on.
            self.abort()
            try:
                self._co.wait(self._co.submit(self._settled(sid)), 10.0)
            except (TimeoutError, KeyboardInterrupt):
                pass
            raise
        return self._outcome(sub)

    def prompt(self, message: str, *, images: Sequence[Any] = (), timeout: float | None = None) -> str:
        """Send a message (with `images` attached, see `dispatch`) and block until it settles."""
        with self._co.waiting():  # from admission on: code the `python` tool runs comes here
            return self.read(self.dispatch(message, images=images), timeout=timeout)

    async def aread(self, receipt: Receipt | str) -> str:
        """`read` for async code running on another event loop."""
        sid = receipt.submission_id if isinstance(receipt, Receipt) else receipt
        return self._outcome(await asyncio.wrap_future(self._co.submit(self._settled(sid))))

    async def aprompt(self, message: str, *, images: Sequence[Any] = ()) -> str:
        """`prompt` for async code running on another event loop."""
        return await self.aread(self.dispatch(message, images=images))

    async def _settled(self, sid: str) -> Submission:
        store = self._conv.store
        while True:
            sub = store.submission(sid)
            if sub is None:
                raise ConfigError(f"no submission {sid!r} in conversation {self._conv.id!r}")
            if sub.state == SubmissionState.SETTLED:
                return sub
            if not self._conv.busy:
                self._conv.kick()
            # The event is set by settlement in this process; the timeout covers another owner.
            try:
                await asyncio.wait_for(self._conv.settled_event(sid).wait(), 0.5)
            except asyncio.TimeoutError:
                pass

    def _outcome(self, sub: Submission) -> str:
        if sub.outcome == Outcome.COMPLETED:
            if sub.result is None and sub.joined_into:
                absorber = self._conv.store.submission(sub.joined_into)
                return absorber.result or "" if absorber else ""
            return sub.result or ""
        if sub.outcome == Outcome.ABORTED:
            err = sub.error or {"type": "submission_aborted", "message": "the submission was aborted"}
            raise error_from_dict(err) if err.get("type") == "submission_aborted" else SubmissionAbortedError(err.get("message", "aborted"))
        raise error_from_dict(sub.error or {"type": "run_error", "message": "the submission failed"})

    # --- control ------------------------------------------------------------------------------

    def abort(self) -> list[str]:
        """Abort every unsettled submission durably; the live one stops promptly (11.5).

        The intent is recorded here, on the caller's thread, before anything else: it holds
        even if the runtime is busy, and its owner settles each submission `aborted`.
        """
        ids = self._conv.store.request_abort(self._conv.id)
        self._co.call(self._conv.stop)
        return ids

    def compact(self) -> None:
        """Compact the context now (raises `SessionBusyError` while a run is going)."""
        self._co.wait(self._co.submit(self._conv.compact()))

    # --- observation --------------------------------------------------------------------------

    def observe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call `callback` with every event of this conversation (on the runtime thread)."""
        return self._conv.bus.observe(callback)

    def stream(self, message: str) -> Iterator[Event]:
        """Send a message and yield its events as they happen, until it settles."""
        q: queue.SimpleQueue[Event] = queue.SimpleQueue()
        stop = self.observe(q.put)
        try:
            receipt = self.dispatch(message)
            while True:
                ev = q.get()
                yield ev
                if ev.type == "submission_settled" and ev.submission_id == receipt.submission_id:
                    return
        finally:
            stop()

    def history(self) -> list[Message]:
        """Every message of the conversation, from the store (compacted ones included)."""
        return [message_from_dict(r.data) for r in self._conv.store.records(self._conv.id, kinds=["message"])]

    def submissions(self) -> list[Submission]:
        """The conversation's submissions in admission order."""
        return self._conv.store.submissions(self._conv.id)

    def status(self) -> dict[str, Any]:
        """Where the conversation stands: queue, owner, context use."""
        subs = self._conv.store.submissions(self._conv.id, unsettled=True)
        lease = self._conv.store.lease(self._conv.id)
        run = self._conv.current_run
        info = run.model.info if run is not None and run.model is not None else None
        used = run.used_tokens() if run is not None else None
        return {
            "conversation_id": self._conv.id,
            "agent": self._conv.agent.name,
            "running": [s.id for s in subs if s.state == SubmissionState.RUNNING],
            "queued": [s.id for s in subs if s.state in (SubmissionState.QUEUED, SubmissionState.JOINING)],
            "owner": lease[0] if lease else None,
            "used_tokens": used,
            "context_window": info.context_window if info else None,
        }


def _store_for(db: Any, cwd: str) -> tuple[Store, bool]:
    from flue_nb.runtime.store._url import db_from_env, is_postgres_url, open_any
    from flue_nb.runtime.store.sqlite import open_store

    if db is not None and not isinstance(db, (str, os.PathLike)):
        return db, False  # a Store object
    db = db_from_env(db)
    if is_postgres_url(db):
        # One connection per server URL per process, shared by its conversations.
        url = str(db).strip()
        with _registry_lock:
            store = _stores.get(url)
            if store is None:
                store = _stores[url] = open_any(url, cwd=cwd)
            return store, True
    if db is not None and os.fspath(db) == ":memory:":
        return open_store(":memory:", cwd=cwd), False
    path = os.path.abspath(os.path.join(cwd, os.fspath(db))) if db is not None else os.path.join(cwd, ".flue", "flue.sqlite")
    if db is None:
        # The default lives in `<cwd>/.flue/`, which a fresh working directory doesn't have yet.
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with _registry_lock:
        store = _stores.get(path)
        if store is None:
            store = _stores[path] = open_store(path, cwd=cwd)
        return store, True


def init(
    agent: AgentLike,
    *,
    conversation: str = "default",
    db: str | os.PathLike[str] | Store | None = None,
    cwd: str | None = None,
    settings: RunSettings | None = None,
    lease_ttl: float = 30.0,
) -> Session:
    """Open (or create) a conversation with an agent.

    `db` is an SQLite path (relative to `cwd`), `":memory:"`, a `postgresql://` URL (the team
    store, `pip install 'flue_nb[postgres]'`) or a `Store` object; when None, `$FLUE_DB`, else
    `.flue/flue.sqlite`.

    `settings` carries the test seams (sleep, clock, random source, model resolver).
    """
    agent_def = as_agent(agent)
    if not isinstance(conversation, str) or not conversation:
        raise ConfigError("conversation must be a non-empty string id")
    store, shared = _store_for(db, cwd or os.getcwd())
    key = (id(store), conversation)
    with _registry_lock:
        conv = _conversations.get(key) if shared and settings is None else None
        if conv is None:
            conv = Conversation(store, conversation, agent_def, settings=settings or RunSettings(), owner=_OWNER, lease_ttl=lease_ttl)
            if shared and settings is None:
                _conversations[key] = conv
        else:
            # One worker per conversation per process: a redefined agent (a re-run notebook cell)
            # takes over from the next submission instead of starting a second worker.
            conv.agent = agent_def
    return Session(conv)
