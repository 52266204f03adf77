"""One conversation's durable worker: admission, the queue, joins, attempts, recovery, settlement.

Everything here is driven by what the store proves (contract 10, 11): a fresh start, the next
attempt after a transient failure and recovery after a crash are the same code — load the
window, close what was left half-done, and continue.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from flue_nb.runtime import events as ev
from flue_nb.runtime.agent import AgentDef
from flue_nb.runtime.agent.limits import Limits
from flue_nb.runtime.core import tally
from flue_nb.runtime.core.admitted import admitted_agent
from flue_nb.runtime.core.failures import Decision, decide
from flue_nb.runtime.core.lease import LeaseKeeper
from flue_nb.runtime.core.lifecycle import finish
from flue_nb.runtime.core.loop import AgentRun, RunSettings
from flue_nb.runtime.core.recovery import UNKNOWN_OUTCOME, close_dangling, keep_partial, user_recorded
from flue_nb.runtime.core.transcript import Transcript
from flue_nb.runtime.core.window import StoreRecorder, load_images, load_window, newer, put_images
from flue_nb.runtime.errors import (
    ConfigError,
    FlueError,
    InternalError,
    RunError,
    SessionBusyError,
    StoreError,
    SubmissionAbortedError,
    SubmissionRetryExhaustedError,
    SubmissionTimeoutError,
)
from flue_nb.runtime.events import Emit, ErrorInfo, EventBus
from flue_nb.runtime.messages import (
    AssistantMessage,
    ImagePart,
    SignalMessage,
    UserMessage,
    image_from_dict,
    image_to_dict,
)
from flue_nb.runtime.store import Outcome, Store, Submission, SubmissionState, SubmissionUpdate
from flue_nb.runtime.tools.summary import Summaries
from flue_nb.runtime.waits import within

__all__ = ["SETTLE_GRACE", "Conversation"]

SETTLE_GRACE = RunSettings().settle_grace
"""The default `RunSettings.settle_grace`: a submission settles within its `timeout` plus this."""


log = logging.getLogger("flue_nb")

S = SubmissionState


class Conversation:
    """The in-process owner of one conversation in one store. Lives on the coordinator loop."""

    def __init__(
        self,
        store: Store,
        conversation_id: str,
        agent: AgentDef,
        *,
        settings: RunSettings,
        owner: str,
        lease_ttl: float = 30.0,
    ) -> None:
        self.store = store
        self.id = conversation_id
        self.agent = agent
        self.admission: dict[str, Any] = {}
        """Settings recorded with each submission admitted here (the cell's agent, model,
        approval), on top of the agent's name; see `Submission.settings`."""
        self.rebuild: Callable[[dict[str, Any]], AgentDef | None] | None = None
        """Rebuilds the agent a submission was admitted with from its stored settings, when they
        differ from `admission` (a recovered run keeps its cell's policy, issue 12.8)."""
        self.settings = settings
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.bus = EventBus(conversation_id, clock=settings.clock)
        self.transcript: Transcript | None = None
        self._seen = 0
        """The newest window record (`WINDOW_KINDS`) the transcript mirrors: loaded or written here."""
        self._behind: tuple[int, int] | None = None
        """(newest window record, tokens): the stored window as `window_tokens` last counted it."""
        self.state: dict[str, Any] = {}
        self.current: Submission | None = None
        self.current_run: AgentRun | None = None
        self._run_task: asyncio.Task[Any] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._settled: dict[str, asyncio.Event] = {}
        self._tools_cache: dict[int, Any] = {}
        self.summaries = Summaries()
        """How the views of this conversation sum calls up: by the tools its runs rendered."""
        self._unknown_calls: dict[str, list[dict[str, str]]] = {}
        self._busy_manual = False
        self.lease = LeaseKeeper(
            store, conversation_id, owner, ttl=lease_ttl, bus=self.bus,
            on_lost=self._stop_run, on_beat=self._notice_abort,
        )  # fmt: skip
        self._recovering: set[str] = set()
        self._plain: set[str] = set()
        """Submissions admitted here with no images: no attachment record to look for."""
        self.broken: FlueError | None = None
        """Why the last worker stopped without settling its work (None: it did not)."""
        store.ensure_conversation(conversation_id, now=settings.clock())

    # --- admission (any thread) ---------------------------------------------------------------

    def admit(
        self, text: str, images: Sequence[ImagePart] = (), *, settings: dict[str, Any] | None = None
    ) -> Submission:
        """Commit a queued submission before any model work (10.1). Thread-safe.

        `images` (with their bytes) are stored before the submission is: a submission that
        exists always finds its attachments, whatever crash happens in between.
        """
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("a message must be a non-empty string")
        sid = f"sub_{uuid.uuid4().hex[:16]}"
        if images:
            self._attach(sid, list(images))
        else:
            self._plain.add(sid)
        recorded = {"agent": self.agent.name, **self.admission, **(settings or {})}
        sub = self.store.admit(self.id, text, submission_id=sid, now=self.settings.clock(), settings=recorded)
        if self.current is not None:
            # A response is live: this message will join it at the next turn boundary (10.3). If
            # the response ends first, it goes back to `queued` and runs on its own.
            if self.store.update_submission(sid, expect=[S.QUEUED], state=S.JOINING):
                sub.state = S.JOINING
        return sub

    def refuse(self, text: str, error: FlueError) -> Submission:
        """Record a message its sender was told was refused: admitted and settled `failed` with
        `error` at once, never run. Runtime loop only: no turn boundary can absorb it in between."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("a message must be a non-empty string")
        sid = f"sub_{uuid.uuid4().hex[:16]}"
        recorded = {"agent": self.agent.name, **self.admission}
        sub = self.store.admit(self.id, text, submission_id=sid, now=self.settings.clock(), settings=recorded)
        self.bus.publish(
            ev.SubmissionQueued(submission_id=sid, text=sub.text, accepted_at=sub.accepted_at, state="queued")
        )
        # Not `_settle`: that would hand other waiting messages back to the queue while a run lives.
        self.store.settle(sid, Outcome.FAILED, error=error.to_dict(), now=self.settings.clock())
        final = self.store.submission(sid) or sub
        self.bus.publish(
            ev.SubmissionSettled(
                submission_id=sid, outcome=Outcome.FAILED.value, result=None, error=ErrorInfo.of(final.error)
            )
        )
        self.settled_event(sid).set()
        return final

    def _attach(self, sid: str, images: list[ImagePart]) -> None:
        # The bytes go to the blob table (once per digest); an `event` record (not tied to the
        # submission row, which does not exist yet) names them for the submission.
        put_images(self.store, [UserMessage("", images=images)])
        data = {"attachments_for": sid, "images": [image_to_dict(p) for p in images]}
        self.store.append(self.id, None, [("event", data)], now=self.settings.clock())

    def _attachments(self, sid: str) -> list[ImagePart]:
        """The images admitted with submission `sid`, bytes loaded (none for most messages)."""
        if sid in self._plain:
            return []  # else every message would read all of the conversation's event records
        for r in self.store.records(self.id, kinds=["event"]):
            if r.data.get("attachments_for") == sid:
                images = [image_from_dict(d) for d in r.data["images"]]
                load_images(self.store, [UserMessage("", images=images)])
                return images
        return []

    def _user_message(self, sub: Submission) -> UserMessage:
        return UserMessage(sub.text, sub.id, self._attachments(sub.id))

    def _recorder(self, sid: str | None) -> StoreRecorder:
        return StoreRecorder(self.store, self.id, sid, self.settings.clock, owner=self.owner, wrote=self._wrote)

    def _wrote(self, seq: int) -> None:
        self._seen = max(self._seen, seq)

    def emitter(self, sid: str | None) -> Emit:
        """An event callback stamped with a submission id."""
        publish = self.bus.publish

        def emit(event: ev.Event) -> ev.Event:
            return publish(event, submission_id=sid)

        return emit

    # --- the worker (coordinator loop) --------------------------------------------------------

    def kick(self, admitted: Submission | None = None) -> None:
        """Start the worker if idle; note a newly admitted submission."""
        if admitted is not None:
            state: Literal["queued", "joining"] = "joining" if admitted.state == S.JOINING else "queued"
            self.bus.publish(
                ev.SubmissionQueued(
                    submission_id=admitted.id, text=admitted.text, accepted_at=admitted.accepted_at, state=state
                )
            )
        if self._worker is None or self._worker.done():
            if self.broken is not None:  # set to wake readers of the failed worker: re-arm them
                self.broken = None
                for event in self._settled.values():
                    event.clear()
            self._worker = asyncio.ensure_future(self._work())

    def raise_if_broken(self) -> None:
        """Raise what stopped the worker (a damaged or unreachable store), if anything did.

        Readers waiting for a submission call this, so they end with the error instead of
        restarting a worker that fails the same way forever (issue 12.4).
        """
        if self.broken is not None:
            raise self.broken

    def settled_event(self, sid: str) -> asyncio.Event:
        """An event set when `sid` settles (in this process)."""
        ev = self._settled.get(sid)
        if ev is None:
            ev = self._settled[sid] = asyncio.Event()
        return ev

    @property
    def busy(self) -> bool:
        """True while a submission or a manual compaction is running."""
        return self.current is not None or self._busy_manual

    def _stop_run(self) -> None:
        if self._run_task is not None and not self._run_task.done():
            self._run_task.cancel()

    def _notice_abort(self) -> None:
        """An abort recorded elsewhere (another process, the CLI, a `StoredConversation`) stops
        the live run here within a second, not only at its next attempt (contract 11.5)."""
        sub, task = self.current, self._run_task
        if sub is None or task is None or task.done():
            return
        try:
            fresh = self.store.submission(sub.id)
        except StoreError:
            return  # the worker meets it too
        if fresh is not None and fresh.abort_requested:
            task.cancel()

    def _runnable(self) -> list[Submission]:
        return [s for s in self.store.submissions(self.id, unsettled=True) if s.state != S.JOINED]

    async def _work(self) -> None:
        try:
            while True:
                runnable = self._runnable()
                if not runnable:
                    await self._idle()
                    # Something may have been admitted while the idle check ran.
                    if not self._runnable():
                        break
                    continue
                if not await self.lease.own(lambda: bool(self._runnable())):
                    break
                self._catch_up()
                runnable = self._runnable()
                if runnable:
                    await self._run_submission(runnable[0])
        except Exception as exc:  # noqa: BLE001 - the worker's own failure ends its readers' waits
            # Outside an attempt (a damaged store failing a read, or failing the settlement that
            # records an attempt's failure), nothing can be settled durably: keep the error here
            # for every reader in this process, which raises it (raise_if_broken).
            if not isinstance(exc, StoreError):
                log.error("flue_nb: internal error in conversation %r", self.id, exc_info=exc)
            self.broken = exc if isinstance(exc, FlueError) else InternalError(f"{type(exc).__name__}: {exc}")
        finally:
            self.lease.stop_beating()
            try:
                if not self.busy:
                    self.store.release_lease(self.id, self.owner)
                self._wake_all()
            except StoreError:
                pass  # already the worker's error, or the next worker's
            if self.broken is not None:
                for event in self._settled.values():
                    event.set()

    async def _idle(self) -> None:
        """Threshold compaction when the loop goes idle (13.3), then the `idle` event."""
        run = self.current_run
        if run is not None and run.rendered is not None and run.rendered.compaction is not False:
            from flue_nb.runtime.core.compaction import CompactionConfig, should_compact

            cfg = run.rendered.compaction
            config = cfg if isinstance(cfg, CompactionConfig) else None
            if run.model is not None and should_compact(run.used_tokens(), run.model.info, config):
                self._busy_manual = True
                try:
                    await run.compact("threshold")
                except FlueError as exc:
                    self.bus.publish(
                        ev.Log(
                            kind="idle_compaction_failed",
                            message=f"idle compaction failed: {exc.message}",
                            error=ErrorInfo(exc.type, exc.message),
                        )
                    )
                finally:
                    self._busy_manual = False
        self.bus.publish(ev.Idle())

    def _wake_all(self) -> None:
        # Only the submissions someone waits for: the conversation's whole list grows with every
        # message (a served kernel admits one per outside call) and was read at each settle.
        for sid, event in list(self._settled.items()):
            if not event.is_set() and (sub := self.store.submission(sid)) is not None and sub.state == S.SETTLED:
                event.set()

    # --- one submission -----------------------------------------------------------------------

    def _load(self) -> Transcript:
        if self.transcript is None:
            self.transcript, self.state, self._seen = load_window(self.store, self.id)
        return self.transcript

    def _catch_up(self) -> None:
        """With the lease just taken: forget a window another process wrote to since this one
        loaded it (it ran a turn while we were idle), so the next read loads it afresh. Kept, it
        sent the model a history without the other process's turns."""
        if self.transcript is not None and newer(self.store, self.id, self._seen):
            self.transcript = None
            self.current_run = None

    def window_tokens(self) -> int | None:
        """Tokens the conversation's window holds now, by this process's counter (None while it
        holds nothing): the window in memory, or the stored one when another process wrote since
        (counted once per change). Any thread."""
        t = self.transcript
        if t is not None and self.busy:
            return self._count(t)  # the lease holder is the only writer of the window
        counted_to = self._behind[0] if self._behind is not None else 0
        mirrored = self._seen if t is not None else 0
        new = newer(self.store, self.id, max(mirrored, counted_to))
        if new:
            stored, _, _ = load_window(self.store, self.id)
            self._behind = (new[-1].seq, self._count(stored))
            return self._behind[1]
        if self._behind is not None and counted_to > mirrored:
            return self._behind[1]
        return self._count(t) if t is not None else None

    def _count(self, t: Transcript) -> int:
        return int(self.settings.tokens().used_tokens(t.messages, system=t.system or ""))

    def _settle(
        self,
        sub: Submission,
        outcome: Outcome,
        *,
        result: str | None = None,
        error: FlueError | dict[str, Any] | None = None,
    ) -> None:
        err = error.to_dict() if isinstance(error, FlueError) else error
        if self.store.settle(sub.id, outcome, result=result, error=err, now=self.settings.clock(), owner=self.owner):
            # Messages that were waiting to join but never got a turn boundary run on their own.
            for other in self.store.submissions(self.id, unsettled=True):
                if other.state == S.JOINING:
                    self.store.update_submission(other.id, expect=[S.JOINING], state=S.QUEUED)
        tally.settled(self.store, self.id)  # a new process's status then folds from near here
        final = self.store.submission(sub.id)
        settled = final.outcome if final and final.outcome else outcome
        recovered = sub.id in self._recovering
        self._recovering.discard(sub.id)
        self._plain.discard(sub.id)
        self.bus.publish(
            ev.SubmissionSettled(
                submission_id=sub.id,
                outcome=settled.value,
                result=final.result if final else result,
                error=ErrorInfo.of(final.error if final else err),
                recovered=recovered,
            )
        )
        self.settled_event(sub.id).set()
        # Every joined message ends too, naming the response that absorbed it (10.4), so a
        # stream or an observer waiting on that message ends with the reply it joined.
        for joined in self.store.joined_into(sub.id):
            self._plain.discard(joined.id)
            if joined.joined_into == sub.id:
                self.bus.publish(
                    ev.SubmissionSettled(
                        submission_id=joined.id,
                        outcome=(joined.outcome or settled).value,
                        result=final.result if final else result,
                        error=ErrorInfo.of(joined.error),
                        joined_into=sub.id,
                    )
                )
                self.settled_event(joined.id).set()

    def _agent_for(self, sub: Submission) -> AgentDef:
        """The agent `sub` was admitted with (see `admitted_agent`)."""
        return admitted_agent(sub, self.agent, self.admission, self.rebuild, self.bus.publish)

    async def _run_submission(self, sub: Submission) -> None:
        sid = sub.id
        emit = self.emitter(sid)
        agent = self._agent_for(sub)
        if sub.state == S.RUNNING:
            self._recovering.add(sid)
            emit(ev.SubmissionRecovery(attempts=sub.attempts))
        last_error: FlueError | None = None
        while True:
            sub = self.store.submission(sid)  # type: ignore[assignment]
            if sub is None or sub.state == S.SETTLED:
                return
            now = self.settings.clock()
            if sub.abort_requested:
                self._load()
                self._close_dangling(sid, "Aborted by the user before this tool call finished.")
                aborted = SubmissionAbortedError("the submission was aborted")
                await self._finish_unrun(sid, agent, "aborted", aborted)
                return self._settle(sub, Outcome.ABORTED, error=aborted)
            remaining = agent.timeout - (now - sub.started_at) if sub.started_at is not None else agent.timeout
            if remaining <= 0:
                message = f"the submission ran past its timeout of {agent.timeout:g} s"
                await self._finish_unrun(sid, agent, "failed", SubmissionTimeoutError(message))
                return self._fail_with(sub, SubmissionTimeoutError, message)
            if sub.attempts >= agent.max_attempts:
                cause = f": {last_error.message}" if last_error else ""
                message = f"the submission used all {agent.max_attempts} attempts{cause}"
                await self._finish_unrun(sid, agent, "failed", SubmissionRetryExhaustedError(message))
                return self._fail_with(sub, SubmissionRetryExhaustedError, message, last_error)
            attempt = sub.attempts + 1
            running = {"state": S.RUNNING, "attempts": attempt, "started_at": sub.started_at or now}
            running |= {"lease_owner": self.owner, "lease_expires": now + self.lease_ttl}
            # The attempt record lets observers rebuild `submission_running` / recovery from the
            # store (15.3); it commits with the running state in one transaction.
            record = {"attempt": attempt, "agent": agent.name, "recovered": sid in self._recovering}
            try:
                # Fenced (issue 12.7): a kernel that lost the lease while it waited out a backoff
                # must not start another attempt, rewrite the owner or call the model again.
                self._recorder(sid).append([], extra=[("event", record)], updates=[SubmissionUpdate(sid, (), running)])
            except SessionBusyError:
                return self._lost(sid)
            except StoreError as exc:
                if exc.details.get("state") == S.SETTLED.value:
                    return  # settled by another owner since it was read: nothing left to run
                raise
            self.current = sub
            emit(ev.SubmissionRunning(attempt=attempt, agent=agent.name))
            emit(ev.AgentStart(agent=agent.name))
            try:
                self._run_task = asyncio.ensure_future(self._attempt_within(sub, attempt, agent, now, remaining))
                text = await asyncio.shield(self._run_task)
            except BaseException as exc:  # noqa: BLE001 - every failure maps to one decision below
                if self._run_task is not None and not self._run_task.done():
                    self._run_task.cancel()
                    await asyncio.gather(self._run_task, return_exceptions=True)
                decision = decide(exc, lease_lost=self.lease.lost, abort_requested=lambda: self._abort_requested(sid))
                if decision is None:
                    raise
            else:
                decision = Decision("completed", result=text)
            finally:
                self.current = None
                self._run_task = None
                emit(ev.AgentEnd(agent=agent.name))
            if decision.kind == "retry":
                last_error = decision.error
                assert decision.error is not None
                emit(
                    ev.Log(
                        kind="attempt_failed",
                        message=f"attempt {attempt} failed: {decision.error.message}",
                        error=ErrorInfo(decision.error.type, decision.error.message),
                    )
                )
                # Never past the submission's timeout: the loop then settles it with that.
                left = agent.timeout - (self.settings.clock() - (sub.started_at or now))
                await self.settings.sleep(max(0.0, min(60.0, 2.0 * 2 ** min(attempt - 1, 5), left)))
                continue
            return self._apply(
                sub, await finish(self._recorder(sid), sid, agent, decision, self.current_run, self.state)
            )

    async def _finish_unrun(
        self, sid: str, agent: AgentDef, kind: Literal["failed", "aborted"], error: FlueError
    ) -> None:
        """`use_agent_finish` for a submission settling before (another) attempt runs: aborted
        while queued, out of time or attempts. It settles failed or aborted whatever they do."""
        await finish(self._recorder(sid), sid, agent, Decision(kind, error=error), None, self.state)

    def _apply(self, sub: Submission, d: Decision) -> None:
        if d.kind == "completed":
            return self._settle(sub, Outcome.COMPLETED, result=d.result)
        if d.kind == "lost":
            return self._lost(sub.id)
        if d.kind == "timeout":
            self._keep_aborted_stream()
            return self._fail_with(
                sub, SubmissionTimeoutError, f"the submission ran past its timeout of {self.agent.timeout:g} s"
            )
        if d.kind == "aborted":
            if d.record_abort:
                self.store.request_abort(self.id)
            self._keep_aborted_stream()
            self._close_dangling(sub.id, "Aborted by the user before this tool call finished.")
            return self._settle(sub, Outcome.ABORTED, error=d.error)
        self._close_dangling(sub.id, "The run failed before this tool call finished.")
        return self._settle(sub, Outcome.FAILED, error=d.error)

    def _abort_requested(self, sid: str) -> bool:
        fresh = self.store.submission(sid)
        return fresh is not None and fresh.abort_requested

    def _lost(self, sid: str) -> None:
        """We lost the lease mid-run: the new owner recovers `sid`; forget our in-memory window."""
        self.lease.lost = False
        self.transcript = None
        self.current_run = None
        self.bus.publish(
            ev.Log(
                submission_id=sid,
                kind="lease_lost",
                message="another process took over this conversation; it will finish this submission",
            )
        )

    def _fail_with(self, sub: Submission, cls: type[RunError], message: str, cause: FlueError | None = None) -> None:
        self._load()
        unknown = self._unknown_calls.pop(sub.id, []) + self._close_dangling(sub.id, UNKNOWN_OUTCOME)
        details: dict[str, Any] = {"unknown_tool_calls": unknown}
        if cause is not None:
            details["last_error"] = cause.to_dict()
        if unknown:
            message += "; tool calls left with unknown outcomes: " + ", ".join(
                f"{c['name']} ({c['id']})" for c in unknown
            )
        self._settle(sub, Outcome.FAILED, error=cls(message, **details))

    def _keep_aborted_stream(self) -> None:
        run, t = self.current_run, self.transcript
        if run is None or t is None:
            return
        msg = run.aborted_message()
        if msg is not None:
            t.commit(self._recorder(run.submission_id), [msg], sid=run.submission_id)
            run.streaming = []

    def _close_dangling(self, sid: str, text: str) -> list[dict[str, str]]:
        """Give every unanswered tool call an error result so the history stays well-formed."""
        if self.transcript is None:
            return []
        return close_dangling(self.transcript, self._recorder(sid), sid, text)

    async def _attempt_within(
        self, sub: Submission, attempt: int, agent: AgentDef, now: float, remaining: float
    ) -> str:
        """One attempt within the `remaining` seconds of its submission. Its coroutine is made
        once this task runs: made beforehand, a Stop that cancels the task before its first
        step left it never awaited (a RuntimeWarning)."""
        work = self._attempt(sub, attempt, agent, now + remaining)
        return await within(work, remaining, grace=self.settings.settle_grace)

    async def _attempt(self, sub: Submission, attempt: int, agent: AgentDef, ends_at: float) -> str:
        t = self._load()
        recorder = self._recorder(sub.id)
        # A first attempt has nothing stored yet (its `attempts` commits before any record of
        # it): two reads fewer per submission; a later attempt looks what the last one left.
        first = attempt == 1
        if sub.id not in t.sids and (first or not user_recorded(self.store, self.id, sub.id)):
            self._close_dangling(sub.id, UNKNOWN_OUTCOME)
            t.commit(recorder, [self._user_message(sub)], sid=sub.id)
            emit = self.emitter(sub.id)
            emit(ev.MessageStart(role="user"))
            emit(ev.MessageEnd(role="user", text=sub.text, from_submission_id=sub.id))
        partial = None if first else self.store.partial(sub.id)
        if partial is not None:
            keep_partial(self.store, self.id, sub.id, partial, recorder, t, self.emitter(sub.id))
        last = t.messages[-1] if t.messages else None
        if isinstance(last, AssistantMessage) and not last.tool_calls and not last.aborted and t.sids[-1] == sub.id:
            return last.text  # the response completed before the crash: settle it (11.2)
        unresolved = [{"id": c.id, "name": c.name} for c in t.unresolved_calls()]
        if unresolved:
            self._unknown_calls[sub.id] = unresolved
        run = AgentRun(
            agent,
            transcript=t,
            emit=self.emitter(sub.id),
            settings=self.settings,
            recorder=recorder,
            state=self.state,
            joins=lambda: self._join(sub),
            tools_cache=self._tools_cache,
            submission_id=sub.id,
            max_turns=(sub.settings or {}).get("max_turns"),
            conversation_id=self.id,
            limits=Limits.of(sub.settings, agent.limits),
            summaries=self.summaries,
        )
        run.ends_at = ends_at
        self.current_run = run
        answer = await run.run()
        return answer.text

    def _join(self, current: Submission) -> list[UserMessage]:
        """Absorb waiting messages into the live response at a turn boundary (10.3)."""
        waiting = [
            s
            for s in self.store.submissions(self.id, unsettled=True)
            if s.state in (S.QUEUED, S.JOINING) and s.seq > current.seq and not s.abort_requested
        ]
        if not waiting:
            return []
        msgs = [self._user_message(s) for s in waiting]
        self._load().commit(
            self._recorder(current.id),
            msgs,
            sid=current.id,
            sids=[s.id for s in waiting],
            updates=[
                SubmissionUpdate(s.id, (S.QUEUED, S.JOINING), {"state": S.JOINED, "joined_into": current.id})
                for s in waiting
            ],
        )
        return msgs

    # --- abort and manual compaction ----------------------------------------------------------

    def abort(self) -> list[str]:
        """Record a durable abort intent on every unsettled submission and stop the live one (11.5)."""
        ids = self.store.request_abort(self.id)
        self.stop()
        return ids

    def stop(self) -> None:
        """Act on recorded abort intents: cancel the live run (which interrupts a running tool),
        or let the worker settle the aborted submissions."""
        if self._run_task is not None and not self._run_task.done():
            self._run_task.cancel()
        else:
            self.kick()

    def note(self, text: str, changes: Sequence[str] = ()) -> None:
        """Tell the model on its next turn what happened outside its runs (an undo or rewind): a
        runtime notice recorded between submissions, `changes` its lines for the views. Raises
        `SessionBusyError` while a run goes."""
        if self.busy:
            raise SessionBusyError("a run is in progress; undo or rewind when it has finished (or abort it first)")
        if not self.store.acquire_lease(self.id, self.owner, ttl=self.lease_ttl):
            raise SessionBusyError("another process owns this conversation; try again when it is idle")
        message = SignalMessage("info", text, list(changes))
        try:
            self._catch_up()
            seqs = self._recorder(None).append([message])
        finally:
            if self._worker is None or self._worker.done():
                self.store.release_lease(self.id, self.owner)
        if self.transcript is not None:
            self.transcript.add(message, seqs[0] if seqs else None, None)

    async def compact(self) -> None:
        """Compact now (contract 13.5), even with threshold compaction off."""
        if self.busy:
            raise SessionBusyError("a run is in progress; compact when it has finished (or abort it first)")
        if not self.store.acquire_lease(self.id, self.owner, ttl=self.lease_ttl):
            holder = self.store.lease(self.id)
            who = holder[0] if holder else "another process"
            raise SessionBusyError(f"another process ({who}) owns this conversation; try again when it is idle")
        self._busy_manual = True
        try:
            self._catch_up()
            t = self._load()
            run = AgentRun(
                self.agent,
                transcript=t,
                emit=self.emitter(None),
                settings=self.settings,
                recorder=self._recorder(None),
                state=self.state,
                tools_cache=self._tools_cache,
                summaries=self.summaries,
            )
            await run.render()
            await run.compact("manual")
        finally:
            self._busy_manual = False
            if self._worker is None or self._worker.done():
                self.store.release_lease(self.id, self.owner)
