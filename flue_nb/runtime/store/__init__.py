"""The durable store protocol: conversations, submissions and the append-only record stream.

The runtime writes through this protocol only; `SQLiteStore` (sqlite.py) is the embedded
implementation, `db=":memory:"` gives a private in-memory one for tests, and `PostgresStore`
(postgres.py) serves a team from one server. Every method is synchronous and each call is one
transaction: what it returns has been committed. Leases are measured by the store's own clock
alone (the lease calls take no `now`; the other `now` arguments date what is written).
Both backends are one `SQLStore` (_sql.py) over a dialect each.

A view follows a conversation with `watch`: on PostgreSQL every write transaction sends a
notification (LISTEN/NOTIFY, _pg_listen.py) and a `Watch` wakes when one arrives; SQLite has no
such thing, so its `Watch` wakes every half second (a cheap look at the newest records).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, Protocol

from flue_nb.runtime.store._watch import POLL_INTERVAL, PollWatch

__all__ = [
    "APPROVAL_ANSWER",
    "APPROVAL_OUTCOMES",
    "APPROVAL_REQUEST",
    "POLL_INTERVAL",
    "ConversationSummary",
    "Outcome",
    "PollWatch",
    "Record",
    "RecordKind",
    "Store",
    "Submission",
    "SubmissionState",
    "SubmissionUpdate",
    "Watch",
]


class SubmissionState(str, Enum):
    """Lifecycle of a submission (contract 10.5)."""

    QUEUED = "queued"
    RUNNING = "running"
    JOINING = "joining"
    JOINED = "joined"
    SETTLED = "settled"


class Outcome(str, Enum):
    """The one terminal outcome of a submission (contract 10.4)."""

    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"


RecordKind = Literal[
    "message",  # data: message_to_dict(...) of a conversation message
    "system",  # data: {"text": frozen system prompt, "roster": {...}} — a window starts
    "compaction",  # data: {"summary": str, "first_kept_seq": int, "reason": str, ...}
    "state",  # data: {"name": str, "value": JSON} — a persistent-state write
    "step",  # data: {"call_id": str, "name": str, "value": JSON} — a durable step's result
    "settlement",  # data: {"outcome": str, "result": str|None, "error": dict|None}
    "event",  # data: anything else worth keeping for a redraw (e.g. a recovery notice)
]


@dataclass(slots=True)
class Submission:
    """One admitted input and where it stands."""

    id: str
    conversation_id: str
    seq: int
    """Admission order: strictly increasing across the store."""
    text: str
    state: SubmissionState
    accepted_at: float
    attempts: int = 0
    started_at: float | None = None
    """Start of the first attempt; the submission timeout counts from here."""
    lease_owner: str | None = None
    lease_expires: float | None = None
    abort_requested: bool = False
    joined_into: str | None = None
    outcome: Outcome | None = None
    result: str | None = None
    """The final text of a completed response."""
    error: dict[str, Any] | None = None
    """`FlueError.to_dict()` of a failed or aborted submission."""
    settled_at: float | None = None
    settings: dict[str, Any] | None = None
    """How the submission was admitted (e.g. `agent`, `model`, `approval`, `max_turns`), as the
    caller passed them to `admit`; a recovered run keeps them instead of the next cell's. Stored
    as JSON in the `settings` column (SQLite migration 3, PostgreSQL migration 3)."""


APPROVAL_REQUEST = "approval_request"
"""The key of an `event` record's data that makes it an approval request."""
APPROVAL_ANSWER = "approval_answer"
"""The key of an `event` record's data that makes it the answer to one (`request`: its seq)."""
APPROVAL_OUTCOMES = ("approved", "denied", "ended")
"""How a request closes: answered yes or no, or ended without an answer (timed out, asker gone)."""


@dataclass(slots=True)
class Record:
    """One entry of a conversation's append-only record stream."""

    seq: int
    """Position in the stream: strictly increasing across the store."""
    conversation_id: str
    submission_id: str | None
    kind: RecordKind
    data: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One conversation as `Store.conversations()` lists it: when it began, how its submissions ended."""

    id: str
    created_at: float
    submissions: int
    completed: int
    failed: int
    aborted: int
    unsettled: int


@dataclass(slots=True)
class SubmissionUpdate:
    """A compare-and-set on a submission, applied in the same transaction as an append.

    Applied only if the submission's state is in `expect` (any state when `expect` is empty);
    if it is not, the whole `append` is rolled back and raises `StoreError`.
    """

    submission_id: str
    expect: Sequence[SubmissionState] = ()
    fields: dict[str, Any] = field(default_factory=dict)
    """Column values to set, e.g. {"state": SubmissionState.JOINED, "joined_into": "s1"}."""


class Watch(Protocol):
    """Something to wait on until a conversation may have changed (`Store.watch`)."""

    def wait(self, timeout: float) -> bool:
        """Block until the conversation may have changed, at most `timeout` s: True if it may have.

        False means nothing announced a change; a caller still looks now and then for what no
        write announces (a lease running out). True may be a false alarm: look, and compare.
        """
        ...

    def close(self) -> None:
        """Stop watching (a `wait` in another thread returns at once)."""
        ...


class Store(Protocol):
    """What the runtime needs from durable storage. One call, one transaction."""

    # conversations and ownership
    def ensure_conversation(self, conversation_id: str, *, now: float) -> None:
        """Create the conversation if it does not exist."""
        ...

    def conversations(self) -> list[ConversationSummary]:
        """Every conversation (the caller's, on a shared server), oldest first, with its counts."""
        ...

    def acquire_lease(self, conversation_id: str, owner: str, *, ttl: float, replacing: str | None = None) -> bool:
        """Take (or renew) ownership if free, expired (by the database's clock), or already ours.

        With `replacing`, also take it while `replacing` holds it, expired or not: the caller has
        proved that owner dead (same host, process gone), so nobody need wait out its lease.
        """
        ...

    def renew_lease(self, conversation_id: str, owner: str, *, ttl: float) -> bool:
        """Extend our lease (and the running submissions' lease columns); False if lost.

        A lease that expired but that nobody else took is still ours and is renewed; a released
        one is not.
        """
        ...

    def release_lease(self, conversation_id: str, owner: str) -> None:
        """Give ownership up (no-op if not ours)."""
        ...

    def lease(self, conversation_id: str) -> tuple[str, float] | None:
        """Current (owner, expires_at by the database's clock), expired or not; None if free."""
        ...

    # submissions
    def admit(
        self,
        conversation_id: str,
        text: str,
        *,
        submission_id: str,
        now: float,
        settings: dict[str, Any] | None = None,
    ) -> Submission:
        """Commit a new queued submission and return it (contract 10.1).

        `settings` (JSON, optional) is kept with it unchanged: `Submission.settings`. Admitting
        the same id again with the same conversation and text returns the stored submission
        unchanged, so a retried admission never duplicates; a different one with a taken id
        raises `StoreError`.
        """
        ...

    def submission(self, submission_id: str) -> Submission | None:
        """One submission by id."""
        ...

    def submissions(
        self,
        conversation_id: str,
        *,
        unsettled: bool = False,
        last: int | None = None,
        before_seq: int | None = None,
    ) -> list[Submission]:
        """The conversation's submissions in admission order (without settled ones if asked).

        `before_seq` keeps those admitted before that seq; `last` keeps the newest `last` of
        them (a page of a long conversation, read along an index, not the whole list).
        """
        ...

    def count_submissions(self, conversation_id: str, *, before_seq: int | None = None) -> int:
        """How many submissions the conversation has (admitted before `before_seq`, if given).

        One lookup however long the conversation (the SQL stores number each submission as it is
        admitted): history and a chat's page ask it for their "N earlier not shown" line.
        """
        ...

    def joined_into(self, submission_id: str) -> list[Submission]:
        """The submissions that joined `submission_id` (its live response), in admission order."""
        ...

    def update_submission(
        self,
        submission_id: str,
        *,
        expect: Iterable[SubmissionState] = (),
        owner: str | None = None,
        **fields: Any,
    ) -> bool:
        """Set columns if the state is in `expect` (or always when empty); True if applied.

        A settled submission's state, result and error never change (False); `settle` is the only
        way to settle, so `outcome`, `settled_at` and `state=SETTLED` are refused here. With
        `owner`, raises `SessionBusyError` (changing nothing) unless it still holds the lease.
        """
        ...

    def settle(
        self,
        submission_id: str,
        outcome: Outcome,
        *,
        result: str | None = None,
        error: dict[str, Any] | None = None,
        now: float,
        owner: str | None = None,
    ) -> bool:
        """Settle once: the first terminal outcome wins (contract 10.4).

        Appends a `settlement` record and settles every submission joined into this one with the
        same outcome (each with its own `settlement` record naming `joined_into`), all in one
        transaction. Returns False if it was already settled. With
        `owner`, raises `SessionBusyError` (changing nothing) unless it still holds the lease.
        """
        ...

    def request_abort(self, conversation_id: str) -> list[str]:
        """Record a durable abort intent on every unsettled submission; return their ids."""
        ...

    # the record stream
    def append(
        self,
        conversation_id: str,
        submission_id: str | None,
        items: Sequence[tuple[RecordKind, dict[str, Any]]],
        *,
        now: float,
        updates: Sequence[SubmissionUpdate] = (),
        owner: str | None = None,
    ) -> list[Record]:
        """Append records (and apply `updates`, and upsert `state` records) atomically.

        Every submission named (`submission_id`, the updates') must be one of this conversation's,
        and every update's expectation must hold, else `StoreError` and nothing is written. With
        `owner`, raises `SessionBusyError` (writing nothing) unless it still holds the
        conversation's lease: the fence that keeps a writer stalled past its lease out.
        """
        ...

    def records(
        self,
        conversation_id: str,
        *,
        after_seq: int = 0,
        kinds: Iterable[RecordKind] | None = None,
        submission_id: str | None = None,
        before_seq: int | None = None,
    ) -> list[Record]:
        """Records in stream order, optionally filtered (`after_seq` < seq < `before_seq`)."""
        ...

    def state(self, conversation_id: str) -> dict[str, Any]:
        """The latest value of every persistent-state name."""
        ...

    # what a status folds from the records, kept so a new process folds only what came after
    def tally(self, conversation_id: str) -> tuple[int, dict[str, Any]] | None:
        """The tally kept for the conversation (`keep_tally`) and the seq of the last record it
        covers, or None when none is kept."""
        ...

    def keep_tally(self, conversation_id: str, seq: int, data: dict[str, Any]) -> None:
        """Keep `data`, a fold of the conversation's records up to `seq`, unless a tally covering
        a later record is kept already. Not fenced and not a change of the conversation (nobody is
        woken): it is derived from the records, which stay the truth."""
        ...

    # a half-streamed response, so recovery can keep what arrived (contract 11.2)
    def put_partial(self, submission_id: str, data: dict[str, Any], *, owner: str | None = None) -> None:
        """Replace the in-progress response snapshot of a submission (fenced like `append`)."""
        ...

    def partial(self, submission_id: str) -> dict[str, Any] | None:
        """The snapshot, if a stream was in progress."""
        ...

    def clear_partial(self, submission_id: str) -> None:
        """Forget the snapshot (the response was recorded whole)."""
        ...

    # image bytes, content-addressed: messages keep an `ImagePart`'s digest, the store its bytes
    # once, however many messages, requests or submissions refer to them
    def put_blob(self, digest: str, data: bytes) -> None:
        """Keep `data` under `digest` (its sha256 hex); a no-op when the same bytes are kept.

        Raises `StoreError` (keeping nothing new) when `digest` is not the sha256 of `data`, or
        when other bytes are kept under it. Not fenced by the lease: the same digest always means the same bytes, and
        a blob that no record refers to (a writer stopped between the two) is harmless.
        """
        ...

    def blob(self, digest: str) -> bytes | None:
        """The bytes kept under `digest`, or None."""
        ...

    def drop_blob(self, digest: str) -> None:
        """Forget the bytes kept under `digest` (a no-op when none are): the effects cap drops the
        oldest old values this way; images are never dropped."""
        ...

    # an approval request and its one answer (records of kind `event`, _sql_approvals.py)
    def close_approval(self, conversation_id: str, request_seq: int, answer: dict[str, Any], *, now: float) -> Record:
        """Close the approval request recorded at `request_seq` with `answer` unless something
        closed it first; the closing record: ours, or the one that came first.

        `answer` is `{"outcome": "approved" | "denied" | "ended", "by": str, "reason": str}`. The
        first answer wins, fenced by the conversation's lock. An `approved` or `denied` answer to a
        request whose submission settled, or whose asker no longer holds an unexpired lease by the
        database's clock, closes it as `ended` instead. Raises `StoreError` when `request_seq` is
        not an approval request of this conversation, `ValueError` for another outcome.
        """
        ...

    # following a conversation from another process
    def add_spend(self, user: str, usd: float, *, at: float) -> None:
        """Count `usd` spent on a model call by `user` at `at` (the hub policy's limits)."""
        ...

    def spent(self, user: str, *, since: float) -> float:
        """What `user` spent on model calls since `since` (epoch seconds), across conversations."""
        ...

    def watch(self, conversation_id: str) -> Watch:
        """A `Watch` that wakes when the conversation may have changed (records, submissions,
        its lease): notified on PostgreSQL, a short poll on SQLite."""
        ...

    def close(self) -> None:
        """Release the connection (idempotent); later calls raise `StoreError`."""
        ...
