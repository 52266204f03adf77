"""Sessions: `init(agent, conversation=..., db=...)` and the blocking and async ways to talk to one."""

from __future__ import annotations

import asyncio
import atexit
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.agent import AgentLike, as_agent, check_max_turns
from flue_nb.runtime.agent.limits import check_limits
from flue_nb.runtime.coordinator import coordinator
from flue_nb.runtime.core.conversation import Conversation
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.core.owner import new_owner, provably_dead
from flue_nb.runtime.core.replay import Page, newest_seq, rebuild_page
from flue_nb.runtime.core.tally import Tally, folded
from flue_nb.runtime.errors import ConfigError, FlueError, SubmissionAbortedError, error_from_dict
from flue_nb.runtime.events import CompactionEnd, Event, SubmissionSettled
from flue_nb.runtime.messages import AssistantMessage, Message, Usage, message_from_dict
from flue_nb.runtime.store import Outcome, RecordKind, Store, Submission, SubmissionState
from flue_nb.runtime.text import clean
from flue_nb.runtime.tools.grants import Grant, grant, grants, revoke
from flue_nb.runtime.tools.summary import Summaries
from flue_nb.runtime.undo import Change, UndoResult

__all__ = [
    "Lease",
    "Page",
    "Receipt",
    "Session",
    "SessionStatus",
    "StoredConversation",
    "StoredTurn",
    "init",
    "open_conversation",
    "store_for",
]

_OWNER = new_owner()
_registry_lock = threading.Lock()
_stores: dict[str, Store] = {}
_conversations: dict[tuple[int, str], Conversation] = {}


def _after_fork_in_child() -> None:
    """A forked child (multiprocessing's default on Linux) is a new lease owner, and keeps none
    of its parent's stores or conversations: their connections and event-loop threads stayed in
    the parent. With the parent's owner string, the child would have passed for the parent as
    the holder of its leases."""
    global _OWNER, _registry_lock
    _OWNER = new_owner()
    _registry_lock = threading.Lock()
    _stores.clear()
    _conversations.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_stores() -> None:
    """Close the stores this process opened (a server store's connection is released politely)."""
    with _registry_lock:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        try:
            store.close()
        except Exception:  # noqa: BLE001 - the process is ending; nothing more to do with it
            pass


@dataclass(frozen=True, slots=True)
class Receipt:
    """Proof of admission: the submission is durable once you hold this (contract 10.1)."""

    submission_id: str
    accepted_at: float
    conversation_id: str


@dataclass(frozen=True, slots=True)
class Lease:
    """Who holds a conversation's lease (`Session.lease()`): one store read, no history."""

    owner: str
    """The holder, `host:pid:nonce`."""
    expires: float
    here: bool
    """True when this process holds it."""
    gone: bool
    """True when the holder provably died (same host, process gone): the next run takes over at once."""


@dataclass(frozen=True, slots=True)
class SessionStatus:
    """Where a conversation stands (`Session.status()`, `%flue status`)."""

    conversation_id: str
    agent: str
    """The agent the conversation's last run used (this session's agent before any run)."""
    model: str | None
    """The model id of the last response (None before the first)."""
    running: tuple[str, ...]
    queued: tuple[str, ...]
    """Submissions waiting to run or to join the live response, in admission order."""
    owner: str | None
    """Who holds the conversation's lease (`host:pid:nonce`), None when idle."""
    owned_here: bool
    """True when this process holds the lease."""
    owner_gone: bool
    """True when the holder provably died (same host, process gone): the next run takes over at once."""
    lease_expires: float | None
    used_tokens: int | None
    """What the context window holds now (contract 13.3), None before any response."""
    context_window: int | None
    compaction_threshold: int | None
    """Used tokens above which the context compacts (None: unknown here, or compaction is off)."""
    usage: Usage
    """Provider-reported token totals of every response in the conversation."""
    outcomes: dict[str, int]
    """Submissions by outcome (settled) or state (not yet), e.g. {"completed": 3, "queued": 1}."""
    cost_usd: float | None = None
    """Estimated cost at list prices (`PRICES_AS_OF`) of the responses (subagents' included)
    whose model has a known price; None when none has."""
    unpriced_responses: int = 0
    """Responses from models without a known price (offline ones, say): not in `cost_usd`."""
    unreported_responses: int = 0
    """Responses whose server reported no token usage: not in `usage` (which is not zero for
    them but unknown; a budget counts their estimate)."""
    lost_calls: int = 0
    """Model calls cut off or retried; what they sent (and what had streamed) is in `cost_usd`,
    estimated, when their model has a price."""


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """One submission's part of the history: its messages, as stored, and how it ended."""

    submission: Submission | None
    """None for messages written outside a submission (a manual compaction's)."""
    messages: list[Message]
    recovered: bool
    """True when a later owner finished it after the process that started it died."""


class StoredConversation:
    """A conversation read from its store, with no agent: looking never starts any work.

    `Session` answers the same questions (and adds what only a live run knows).
    """

    def __init__(self, store: Store, conversation_id: str) -> None:
        self.store = store
        self.conversation_id = conversation_id

    def submissions(self) -> list[Submission]:
        """The conversation's submissions in admission order."""
        return self.store.submissions(self.conversation_id)

    def history(self) -> list[Message]:
        """Every message of the conversation (compacted ones included)."""
        return [message_from_dict(r.data) for r in self.store.records(self.conversation_id, kinds=["message"])]

    def events(self) -> list[Event]:
        """The conversation's events rebuilt from the store (contract 15.3), for a redraw."""
        from flue_nb.runtime.core.replay import rebuild_events

        return rebuild_events(self.store, self.conversation_id)

    def page(self, last: int, *, before_seq: int | None = None) -> Page:
        """The events of the newest `last` submissions (of those admitted before `before_seq`),
        rebuilt from the store by index: a view draws a page of a long conversation."""
        return rebuild_page(self.store, self.conversation_id, last=last, before_seq=before_seq)

    def newest_seq(self) -> int:
        """The seq of the newest record (0: none), read by index: what a follower compares with."""
        return newest_seq(self.store, self.conversation_id)

    def turns(self, last: int | None = None, *, page: Page | None = None) -> list[StoredTurn]:
        """The history grouped by submission, in order, with stored images loaded back; with
        `last`, only the newest `last` submissions' (read by index, not the whole history); with
        `page` (read by `page()`), that page's, from the records it read."""
        from flue_nb.runtime.core.replay import page_records
        from flue_nb.runtime.core.window import load_images

        kinds: list[RecordKind] = ["message", "event"]
        if page is not None:
            subs = {s.id: s for s in page.submissions}
            records = [r for r in page.records if r.kind in kinds]
        elif last is None:
            subs = {s.id: s for s in self.submissions()}
            records = self.store.records(self.conversation_id, kinds=kinds)
        else:
            newest, records, _, _ = page_records(self.store, self.conversation_id, last=last, kinds=kinds)
            subs = {s.id: s for s in newest}
        recovered = {r.submission_id for r in records if r.kind == "event" and r.data.get("recovered")}
        groups: list[tuple[str | None, list[Message]]] = []
        for r in (r for r in records if r.kind == "message"):
            if not groups or groups[-1][0] != r.submission_id:
                groups.append((r.submission_id, []))
            groups[-1][1].append(message_from_dict(r.data))
        load_images(self.store, [m for _, messages in groups for m in messages])
        return [StoredTurn(subs.get(sid) if sid else None, messages, sid in recovered) for sid, messages in groups]

    def usage(self, submission_id: str | None = None) -> Usage:
        """Provider-reported token totals of one submission's responses, or of the conversation's."""
        if submission_id is None:
            return self._folded().usage
        return sum((m.usage for m in self._responses(submission_id) if m.usage is not None), Usage())

    def _folded(self) -> Tally:
        return folded(self.store, self.conversation_id)

    def _responses(self, submission_id: str | None = None) -> list[AssistantMessage]:
        records = self.store.records(self.conversation_id, kinds=["message"], submission_id=submission_id)
        out = [message_from_dict(r.data) for r in records if r.data.get("kind") == "assistant"]
        return [m for m in out if isinstance(m, AssistantMessage)]

    def abort(self) -> list[str]:
        """Record an abort intent on every unsettled submission (its owner stops it)."""
        return self.store.request_abort(self.conversation_id)

    def lease(self) -> Lease | None:
        """Who holds the conversation now (None when idle)."""
        held = self.store.lease(self.conversation_id)
        if held is None:
            return None
        owner, expires = held
        here = owner == _OWNER
        return Lease(owner, expires, here, not here and provably_dead(owner))

    def status(
        self, *, agent: str = "", live: Any = None, count: Callable[[], int | None] | None = None
    ) -> SessionStatus:
        """Where the conversation stands; `live` is this process's run of it, when there is one,
        and `count` counts the window's tokens now (`Conversation.window_tokens`): it is asked
        with a live run, or when no response reported how full the window was."""
        tally = self._folded()
        unsettled = self.store.submissions(self.conversation_id, unsettled=True)
        outcomes = dict(tally.settled)
        for sub in unsettled:
            outcomes[sub.state.value] = outcomes.get(sub.state.value, 0) + 1
        lease = self.lease()
        used, model = tally.used_tokens, tally.model
        window = threshold = None
        if live is not None and live.model is not None:
            from flue_nb.runtime.core.compaction import CompactionConfig
            from flue_nb.runtime.core.compaction import threshold as compaction_threshold

            info = live.model.info
            counted = count() if count is not None else None
            used = counted if counted is not None else live.used_tokens()
            model, window = info.id, info.context_window
            cfg = live.rendered.compaction if live.rendered is not None else True
            if cfg is not False:
                threshold = compaction_threshold(info, cfg if isinstance(cfg, CompactionConfig) else None)
        elif used is None and count is not None:
            used = count()  # a model that reports no usage, and no run here yet
        return SessionStatus(
            conversation_id=self.conversation_id,
            agent=tally.agent or agent,
            model=model,
            running=tuple(s.id for s in unsettled if s.state == SubmissionState.RUNNING),
            queued=tuple(s.id for s in unsettled if s.state in (SubmissionState.QUEUED, SubmissionState.JOINING)),
            owner=lease.owner if lease else None,
            owned_here=bool(lease and lease.here),
            owner_gone=bool(lease and lease.gone),
            lease_expires=lease.expires if lease else None,
            used_tokens=used,
            context_window=window,
            compaction_threshold=threshold,
            usage=tally.usage,
            outcomes=outcomes,
            cost_usd=tally.spend.usd,
            unpriced_responses=tally.spend.unpriced,
            lost_calls=tally.lost_calls,
            unreported_responses=tally.unreported,
        )


class Session:
    """A handle on one conversation. Methods are thread-safe; the work runs on the coordinator."""

    def __init__(self, conversation: Conversation) -> None:
        from flue_nb.runtime.tracing import instrument_from_env

        instrument_from_env()
        self._conv = conversation
        self._stored = StoredConversation(conversation.store, conversation.id)
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

    @property
    def summaries(self) -> Summaries:
        """How a view of this conversation sums a call up: by the tools its agent's runs in this
        process had (`Tool.summary_arg`), else by the call's first text argument."""
        return self._conv.summaries

    def __repr__(self) -> str:
        return f"<flue_nb Session conversation={self._conv.id!r} agent={self._conv.agent.name!r}>"

    # --- admission and outcomes ---------------------------------------------------------------

    def dispatch(
        self,
        message: str,
        *,
        images: Sequence[Any] = (),
        max_turns: int | None = None,
        max_cost_usd: float | None = None,
        max_input_tokens: int | None = None,
        max_output_tokens: int | None = None,
    ) -> Receipt:
        """Admit a message durably and return at once; it runs (or joins) in admission order.

        `images` are attached to the message: matplotlib figures, `IPython.display.Image`s, PIL
        images, image bytes or paths of PNG/JPEG/GIF/WebP files (scaled to the model's limits).
        `max_turns` caps this submission's model calls (default: the agent's `max_turns`); it is
        stored with the submission, so a recovered run keeps it. `max_cost_usd` (dollars at list
        prices, subagents included), `max_input_tokens` and `max_output_tokens` are this
        submission's budget (default: the agent's); past it, it settles `failed` with
        `budget_exceeded` before its next model call. Stored too: a recovered run keeps counting.
        """
        from flue_nb.runtime.images import image_from_object

        parts = [image_from_object(obj) for obj in images]
        per_call = check_limits(
            max_cost_usd=max_cost_usd, max_input_tokens=max_input_tokens, max_output_tokens=max_output_tokens
        )
        if max_turns is not None:
            per_call["max_turns"] = check_max_turns(max_turns)
        sub = self._conv.admit(clean(message), parts, settings=per_call or None)
        self._co.call(self._conv.kick, sub)
        return Receipt(sub.id, sub.accepted_at, self._conv.id)

    async def arefuse(self, message: str, error: FlueError) -> Receipt:
        """Record a message that was refused without running (its sender was told why): it is
        admitted and settled `failed` with `error` at once, and no model ever sees it."""
        conv = self._conv

        async def refuse() -> Submission:
            return conv.refuse(clean(message), error)

        sub = await asyncio.wrap_future(self._co.submit(refuse()))
        return Receipt(sub.id, sub.accepted_at, conv.id)

    def read(self, receipt: Receipt | str, *, timeout: float | None = None) -> str:
        """Wait for a submission's outcome: its reply, or the error it failed or aborted with."""
        return self._outcome(self.wait(receipt, timeout=timeout))

    def wait(self, receipt: Receipt | str, *, timeout: float | None = None) -> Submission:
        """Wait until a submission settles and return it (outcome, result, error), raising nothing.

        `read` is this plus the reply text (or the stored error, raised).
        """
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
        return sub

    def prompt(
        self,
        message: str,
        *,
        images: Sequence[Any] = (),
        timeout: float | None = None,
        max_turns: int | None = None,
        max_cost_usd: float | None = None,
        max_input_tokens: int | None = None,
        max_output_tokens: int | None = None,
    ) -> str:
        """Send a message (with `images`, `max_turns` and a budget, see `dispatch`); block until it settles."""
        with self._co.waiting():  # from admission on: code the `python` tool runs comes here
            receipt = self.dispatch(
                message,
                images=images,
                max_turns=max_turns,
                max_cost_usd=max_cost_usd,
                max_input_tokens=max_input_tokens,
                max_output_tokens=max_output_tokens,
            )
            return self.read(receipt, timeout=timeout)

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
            self._conv.raise_if_broken()  # a worker that cannot settle it: say why, never spin

    def _outcome(self, sub: Submission) -> str:
        if sub.outcome == Outcome.COMPLETED:
            if sub.result is None and sub.joined_into:
                absorber = self._conv.store.submission(sub.joined_into)
                return absorber.result or "" if absorber else ""
            return sub.result or ""
        if sub.outcome == Outcome.ABORTED:
            err = sub.error or {"type": "submission_aborted", "message": "the submission was aborted"}
            raise (
                error_from_dict(err)
                if err.get("type") == "submission_aborted"
                else SubmissionAbortedError(err.get("message", "aborted"))
            )
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

    def compact(self) -> CompactionEnd | None:
        """Compact the context now; the `compaction` event, or None when nothing could be folded.

        Raises `SessionBusyError` while a run is going.
        """
        ended: list[CompactionEnd] = []
        stop = self.observe(lambda e: ended.append(e) if isinstance(e, CompactionEnd) and e.task_id is None else None)
        try:
            self._co.wait(self._co.submit(self._conv.compact()))
        finally:
            stop()
        return next((e for e in reversed(ended) if not e.skipped and not e.is_error), None)

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
                if isinstance(ev, SubmissionSettled) and ev.submission_id == receipt.submission_id:
                    return
        finally:
            stop()

    def history(self) -> list[Message]:
        """Every message of the conversation, from the store (compacted ones included)."""
        return self._stored.history()

    def events(self) -> list[Event]:
        """The conversation's events rebuilt from the store (contract 15.3), for a redraw."""
        return self._stored.events()

    def submissions(self) -> list[Submission]:
        """The conversation's submissions in admission order."""
        return self._stored.submissions()

    def page(self, last: int, *, before_seq: int | None = None) -> Page:
        """The events of the newest `last` submissions (of those before `before_seq`), for a redraw."""
        return self._stored.page(last, before_seq=before_seq)

    def newest_seq(self) -> int:
        """The seq of the conversation's newest record (0: none), read by index."""
        return self._stored.newest_seq()

    def turns(self, last: int | None = None, *, page: Page | None = None) -> list[StoredTurn]:
        """The history grouped by submission, with how each ended (`%flue history`); with
        `last`, the newest `last` submissions' only; with `page` (from `page()`), its own."""
        return self._stored.turns(last, page=page)

    def usage(self, submission_id: Receipt | str | None = None) -> Usage:
        """Provider-reported token totals of one submission's responses, or of the conversation's."""
        sid = submission_id.submission_id if isinstance(submission_id, Receipt) else submission_id
        return self._stored.usage(sid)

    def lease(self) -> Lease | None:
        """Who holds the conversation now (None when idle); cheaper than `status()`."""
        return self._stored.lease()

    # --- review, undo, rewind (issue 34) ------------------------------------------------------

    def changes(self, submission_id: Receipt | str | None = None) -> list[Change]:
        """What one run's tool calls changed (the newest run with changes when None), as items
        `STEP.ITEM`; `item.describe()` is its line."""
        from flue_nb.runtime.undo import changes

        sid = self._effects_submission(submission_id)
        return changes(self.store, self.conversation_id, sid) if sid is not None else []

    def undo(
        self,
        item: str | Change | Sequence[str | Change] = "all",
        *,
        submission_id: Receipt | str | None = None,
        force: bool = False,
    ) -> UndoResult:
        """Undo items of a run (`"all"`, a `STEP.ITEM` key, a name, a path or a `Change`): all or
        nothing, unless `force`. The model is told on its next turn."""
        from flue_nb.runtime.undo import undo

        listed = [c for c in self.changes(submission_id) if not c.undone]
        wanted = [item] if isinstance(item, (str, Change)) else list(item)
        chosen: list[Change] = []
        for w in wanted:
            if isinstance(w, Change):
                chosen.append(w)
            elif w == "all":
                chosen.extend(listed)
            else:
                found = [c for c in listed if c.key == w or c.target == w or c.target.endswith(os.sep + w)]
                if not found:
                    raise LookupError(f"no change {w!r} to undo: `%flue changes` lists them")
                chosen.append(found[-1])
        self._check_idle()
        result = undo(self.store, self.conversation_id, chosen, force=force)
        self._tell_model(result, "undid")
        return result

    def rewind(self, step: int | str, *, submission_id: Receipt | str | None = None, force: bool = False) -> UndoResult:
        """Put cells, files and variables back as they were before `step` of a run (its number as
        `changes` lists it, or its tool call id): that step's effects and every later one's are
        undone, newest first, without running anything again. The model is told."""
        from flue_nb.runtime.undo import rewind

        sid = self._effects_submission(submission_id)
        if sid is None:
            raise LookupError("no run with recorded changes to rewind")
        self._check_idle()
        result = rewind(self.store, self.conversation_id, sid, step, force=force)
        self._tell_model(result, f"rewound to before step {step} of submission {sid}: undid")
        return result

    def materialize(self, submission_id: Receipt | str | None = None) -> Any:
        """Write the run's state-changing `python` calls into the notebook as provenance-marked
        cells (every such call of the conversation no cell recreates yet, when None), so the
        saved notebook reruns; the result's `text()` says where they went. Needs the notebook
        layer (`%load_ext flue_nb` in a kernel), which supplies the document."""
        from flue_nb.runtime.errors import ConfigError
        from flue_nb.runtime.materializer import MATERIALIZERS

        if not MATERIALIZERS:
            raise ConfigError(
                "session.materialize needs a notebook: call it in a kernel with the extension loaded "
                "(`%load_ext flue_nb`), or use `%flue materialize` there"
            )
        sid = submission_id.submission_id if isinstance(submission_id, Receipt) else submission_id
        return MATERIALIZERS[-1](self.store, self.conversation_id, sid)

    def _effects_submission(self, submission_id: Receipt | str | None) -> str | None:
        from flue_nb.runtime.undo import changes

        if submission_id is not None:
            return submission_id.submission_id if isinstance(submission_id, Receipt) else submission_id
        every = changes(self.store, self.conversation_id)
        return every[-1].submission_id if every else None

    def _check_idle(self) -> None:
        from flue_nb.runtime.errors import SessionBusyError

        if self.store.submissions(self.conversation_id, unsettled=True) or self._conv.busy:
            raise SessionBusyError("a run is in progress; undo or rewind when it has finished (or abort it first)")

    def _tell_model(self, result: UndoResult, verb: str) -> None:
        if not result.undone:
            return
        lines = [f"The user {verb} these changes of yours (they are no longer in effect):"]
        lines += [f"- {c.describe().split(' ', 1)[1]}" for c in result.undone]
        if result.refused:
            lines.append("Not undone: " + "; ".join(f"{c.target} ({why})" for c, why in result.refused))
        text = "\n".join(lines)
        # What the views draw of the notice (it showed as a bare "signal (info)").
        changes = [f"the user {verb} {c.describe().split(' ', 1)[1]}" for c in result.undone]

        async def note() -> None:
            self._conv.note(text, changes)

        self._co.wait(self._co.submit(note()))

    def status(self) -> SessionStatus:
        """Where the conversation stands: agent and model in use, queue, owner, context use."""
        conv = self._conv
        return self._stored.status(agent=conv.agent.name, live=conv.current_run, count=conv.window_tokens)

    # --- approval grants ------------------------------------------------------------------------

    def allow(self, tool: str, pattern: str = "*") -> list[Grant]:
        """Always allow calls of `tool` whose summary argument matches `pattern` in this
        conversation (kept in its store; what `ask` would have asked about); the grants after."""
        return grant(self._conv.store, self._conv.id, tool, pattern)

    def revoke(self, tool: str | None = None, pattern: str | None = None) -> list[Grant]:
        """Take back this conversation's grants of `tool` (all without one); those taken back."""
        return revoke(self._conv.store, self._conv.id, tool, pattern)

    def grants(self) -> list[Grant]:
        """This conversation's grants ("always allow this")."""
        return grants(self._conv.store, self._conv.id)


def open_conversation(
    conversation: str = "default", *, db: str | os.PathLike[str] | Store | None = None, cwd: str | None = None
) -> StoredConversation:
    """Read a conversation from its store without an agent (history, status, events, abort)."""
    store, _ = store_for(db, cwd or os.getcwd())
    return StoredConversation(store, conversation)


def store_for(db: Any, cwd: str) -> tuple[Store, bool]:
    """The store `db` names (a `Store`, a URL, a path, or None: `$FLUE_DB` or the default file in
    `cwd`), and whether it is one connection shared by this process's sessions."""
    from flue_nb.runtime.store.sqlite import open_store
    from flue_nb.runtime.store.url import db_from_env, is_postgres_url, open_any

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
    path = (
        os.path.abspath(os.path.join(cwd, os.fspath(db)))
        if db is not None
        else os.path.join(cwd, ".flue", "flue.sqlite")
    )
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
    admission: dict[str, Any] | None = None,
    rebuild: Callable[[dict[str, Any]], AgentLike | None] | None = None,
) -> Session:
    """Open (or create) a conversation with an agent.

    `db` is an SQLite path (relative to `cwd`), `":memory:"`, a `postgresql://` URL (the team
    store, `pip install 'flue_nb[postgres]'`) or a `Store` object; when None, `$FLUE_DB`, else
    `.flue/flue.sqlite`.

    `settings` carries the test seams (sleep, clock, random source, model resolver).

    `admission` is recorded with every submission admitted through this session (JSON: e.g. the
    notebook's model and approval policy); a submission recovered later whose recorded settings
    differ from the recovering session's runs with `rebuild(settings)`'s agent instead (issue
    12.8: a recovered run keeps the policy its cell was admitted with).
    """
    agent_def = as_agent(agent)
    if not isinstance(conversation, str) or not conversation:
        raise ConfigError("conversation must be a non-empty string id")
    conversation = clean(conversation)  # an id that is not valid UTF-8 is stored escaped
    store, shared = store_for(db, cwd or os.getcwd())
    key = (id(store), conversation)
    with _registry_lock:
        conv = _conversations.get(key) if shared and settings is None else None
        if conv is None:
            conv = Conversation(
                store, conversation, agent_def, settings=settings or RunSettings(), owner=_OWNER, lease_ttl=lease_ttl
            )
            if shared and settings is None:
                _conversations[key] = conv
        else:
            # One worker per conversation per process: a redefined agent (a re-run notebook cell)
            # takes over from the next submission instead of starting a second worker.
            conv.agent = agent_def
        conv.admission = dict(admission or {})
        if rebuild is not None:
            conv.rebuild = lambda stored: None if (found := rebuild(stored)) is None else as_agent(found)
    return Session(conv)
