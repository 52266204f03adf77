"""One contract suite, two backends: every Store method, migrations, leases and two real processes.

`store` runs each contract test on an SQLite file, SQLite in memory and a throwaway PostgreSQL
server (tests/pg.py); a behaviour that differs between them is a bug in one of them. Tests of one
backend's own machinery (SQLite's file handling, PostgreSQL's reconnects) say so in their names.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flue_nb
from flue_nb.runtime.errors import SessionBusyError, StoreError
from flue_nb.runtime.store import Outcome, SubmissionState, SubmissionUpdate
from flue_nb.runtime.store._sqlite_schema import MIGRATIONS, SCHEMA_VERSION, Migration, migrate
from flue_nb.runtime.store.sqlite import SQLiteStore, open_store
from flue_nb.runtime.store.sqlite import SQLiteStore as _SQLite

QUEUED, RUNNING, JOINING, JOINED, SETTLED = (
    SubmissionState.QUEUED,
    SubmissionState.RUNNING,
    SubmissionState.JOINING,
    SubmissionState.JOINED,
    SubmissionState.SETTLED,
)


BACKENDS = ["sqlite-file", "sqlite-memory", "postgres"]


def open_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A fresh store of `kind`; a `postgres` one is a new database on the throwaway server."""
    if kind == "postgres":
        from flue_nb.runtime.store.postgres import PostgresStore

        return PostgresStore(request.getfixturevalue("pg_url"))
    return _SQLite(tmp_path / "s.sqlite" if kind == "sqlite-file" else ":memory:")


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    s = open_backend(request.param, request, tmp_path)
    yield s
    s.close()


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a durable store lives, for tests that reopen it or share it between processes."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "s.sqlite")


def reopen(db: str) -> Any:
    """Open the store `db` names: an SQLite path or a PostgreSQL URL."""
    if db.startswith("postgresql://"):
        from flue_nb.runtime.store.postgres import PostgresStore

        return PostgresStore(db)
    return _SQLite(db)


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "s.sqlite")
    yield s
    s.close()


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def _query(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = _raw(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


# -- opening ---------------------------------------------------------------------------------------


def test_open_store_default_path_creates_flue_directory(tmp_path: Path) -> None:
    with open_store(None, cwd=str(tmp_path)) as s:
        assert Path(s.path) == tmp_path / ".flue" / "flue.sqlite"
    assert (tmp_path / ".flue" / "flue.sqlite").is_file()


def test_open_store_resolves_relative_paths_against_cwd(tmp_path: Path) -> None:
    with open_store("rel.sqlite", cwd=str(tmp_path)) as s:
        assert Path(s.path) == tmp_path / "rel.sqlite"
    absolute = tmp_path / "sub" / "abs.sqlite"
    absolute.parent.mkdir()
    with open_store(absolute, cwd="/nonexistent") as s:
        assert Path(s.path) == absolute


def test_open_store_memory_is_private_and_leaves_no_file(tmp_path: Path) -> None:
    with (
        open_store(":memory:", cwd=str(tmp_path)) as a,
        open_store(":memory:", cwd=str(tmp_path)) as b,
    ):
        a.admit("c", "hi", submission_id="s1", now=1.0)
        assert b.submission("s1") is None
        assert a.journal_mode == "memory"
    assert list(tmp_path.iterdir()) == []


def test_file_store_uses_wal_and_normal_synchronous_by_default(file_store: SQLiteStore) -> None:
    assert file_store.journal_mode == "wal"
    assert file_store.synchronous == "NORMAL"
    assert _query(Path(file_store.path), "PRAGMA journal_mode") == [("wal",)]


def test_synchronous_full_is_an_option(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.sqlite", synchronous="FULL") as s:
        assert s.synchronous == "FULL"
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(tmp_path / "t.sqlite", synchronous="OFF")  # type: ignore[arg-type]


def test_tables_are_strict_and_foreign_keys_are_on(file_store: SQLiteStore) -> None:
    rows = _query(Path(file_store.path), "SELECT name, strict FROM pragma_table_list WHERE schema = 'main'")
    strict = {name: bool(flag) for name, flag in rows if not str(name).startswith("sqlite_")}
    assert set(strict) == {
        "schema_version",
        "conversations",
        "submissions",
        "records",
        "state",
        "partials",
        "blobs",
        "spend",
        "tallies",
    }
    assert all(strict.values())
    file_store.ensure_conversation("c", now=1.0)
    with pytest.raises(StoreError):
        file_store.append("c", "no-such-submission", [("event", {})], now=2.0)


def test_corrupt_file_raises_store_error_naming_path_and_remedy(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not sqlite at all" * 200)
    with pytest.raises(StoreError, match=r"bad\.sqlite.*restore it from a backup, or move the file aside"):
        SQLiteStore(bad)


def test_file_damaged_after_its_header_raises_store_error_with_advice(tmp_path: Path) -> None:
    path = tmp_path / "damaged.sqlite"
    with SQLiteStore(path) as s:
        s.admit("c", "hi", submission_id="s1", now=1.0)
        for i in range(200):
            s.append("c", "s1", [("message", {"i": i, "text": "x" * 500})], now=2.0)
    data = bytearray(path.read_bytes())
    page = 4096
    data[page:] = b"\xde\xad\xbe\xef" * ((len(data) - page) // 4)  # keep page 1 only
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"damaged\.sqlite.*restore it from a backup, or move the file aside"):
        s = SQLiteStore(path)
        try:
            s.records("c")
        finally:
            s.close()


def test_missing_directory_raises_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="nowhere"):
        SQLiteStore(tmp_path / "nowhere" / "s.sqlite")


def test_closed_store_raises_and_close_is_idempotent(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "s.sqlite")
    s.close()
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.submission("x")


def test_lock_held_by_another_connection_past_busy_timeout_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with SQLiteStore(path, busy_timeout=0.1) as s:
        other = _raw(path)
        try:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError, match="locked"):
                s.ensure_conversation("c", now=1.0)
            other.execute("ROLLBACK")
        finally:
            other.close()
        s.ensure_conversation("c", now=1.0)  # usable again once the lock is gone


# -- migrations ------------------------------------------------------------------------------------


def test_empty_sqlite_file_is_migrated_to_current_version(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    _raw(path).close()  # a zero-page SQLite file: version 0
    with SQLiteStore(path) as s:
        s.admit("c", "hi", submission_id="s1", now=1.0)
    assert _query(path, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]


def test_old_version_file_migrates_forward_keeping_data(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with SQLiteStore(path) as s:  # written at the current version: the "old" one below
        s.admit("c", "kept", submission_id="s1", now=1.0)
    extra = Migration(
        SCHEMA_VERSION + 1,
        ("CREATE TABLE extra (x INTEGER) STRICT", "INSERT INTO extra VALUES (42)"),
    )
    conn = _raw(path)
    try:
        assert migrate(conn, str(path), (*MIGRATIONS, extra)) == SCHEMA_VERSION + 1
        assert conn.execute("SELECT x FROM extra").fetchall() == [(42,)]
        assert conn.execute("SELECT text FROM submissions").fetchall() == [("kept",)]
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION + 1,)]
        # Applying again is a no-op.
        assert migrate(conn, str(path), (*MIGRATIONS, extra)) == SCHEMA_VERSION + 1
    finally:
        conn.close()


def test_failed_migration_rolls_back_to_the_old_version(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    SQLiteStore(path).close()
    broken = Migration(SCHEMA_VERSION + 1, ("CREATE TABLE half (x INTEGER) STRICT", "NOT SQL"))
    conn = _raw(path)
    try:
        with pytest.raises(sqlite3.OperationalError):
            migrate(conn, str(path), (*MIGRATIONS, broken))
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchall() == []
    finally:
        conn.close()


def test_newer_schema_version_refuses_and_says_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    SQLiteStore(path).close()
    conn = _raw(path)
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 5,))
    conn.close()
    with pytest.raises(StoreError, match=r"new\.sqlite.*upgrade flue_nb"):
        SQLiteStore(path)


def test_someone_elses_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    conn = _raw(path)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.close()
    with pytest.raises(StoreError, match="not a flue_nb store"):
        SQLiteStore(path)
    assert _query(path, "SELECT name FROM sqlite_master") == [("users",)]


# -- conversations and submissions -----------------------------------------------------------------


def test_ensure_conversation_is_idempotent(file_store: SQLiteStore) -> None:
    file_store.ensure_conversation("c", now=1.0)
    file_store.ensure_conversation("c", now=2.0)
    assert _query(Path(file_store.path), "SELECT id, created_at FROM conversations") == [("c", 1.0)]


def test_admit_commits_a_queued_submission_with_increasing_seq(store: SQLiteStore) -> None:
    a = store.admit("c1", "first", submission_id="s1", now=10.0)
    b = store.admit("c2", "second", submission_id="s2", now=11.0)
    c = store.admit("c1", "third", submission_id="s3", now=12.0)
    assert (a.state, a.accepted_at, a.attempts, a.outcome, a.abort_requested) == (
        QUEUED,
        10.0,
        0,
        None,
        False,
    )
    assert a.seq < b.seq < c.seq
    assert [s.id for s in store.submissions("c1")] == ["s1", "s3"]
    assert store.submission("s2") == b
    assert store.submission("missing") is None
    assert store.submissions("nobody") == []


def test_admitting_the_same_submission_again_duplicates_nothing(store: SQLiteStore) -> None:
    first = store.admit("c", "hi", submission_id="s1", now=1.0)
    assert store.admit("c", "hi", submission_id="s1", now=2.0) == first
    assert len(store.submissions("c")) == 1
    with pytest.raises(StoreError, match="already taken"):
        store.admit("c", "different", submission_id="s1", now=3.0)


def test_submissions_unsettled_excludes_settled(store: SQLiteStore) -> None:
    for i in range(3):
        store.admit("c", f"m{i}", submission_id=f"s{i}", now=float(i))
    store.settle("s1", Outcome.COMPLETED, result="done", now=5.0)
    assert [s.id for s in store.submissions("c", unsettled=True)] == ["s0", "s2"]
    assert [s.id for s in store.submissions("c")] == ["s0", "s1", "s2"]


def test_update_submission_compare_and_set(store: SQLiteStore) -> None:
    store.admit("c", "hi", submission_id="s1", now=1.0)
    assert store.update_submission("s1", expect=[QUEUED], state=RUNNING, attempts=1, started_at=2.0)
    assert not store.update_submission("s1", expect=[QUEUED], state=RUNNING, attempts=2)
    s = store.submission("s1")
    assert s is not None and (s.state, s.attempts, s.started_at) == (RUNNING, 1, 2.0)
    assert store.update_submission("s1", abort_requested=True, error={"type": "x", "message": "m"})
    s = store.submission("s1")
    assert s is not None and s.abort_requested is True and s.error == {"type": "x", "message": "m"}
    assert not store.update_submission("missing", state=RUNNING)
    assert store.update_submission("s1", expect=["running"], attempts=3)  # plain strings work too


def test_update_submission_refuses_settle_only_and_unknown_fields(store: SQLiteStore) -> None:
    store.admit("c", "hi", submission_id="s1", now=1.0)
    for fields in (
        {"outcome": Outcome.FAILED},
        {"settled_at": 1.0},
        {"state": SETTLED},
        {"seq": 9},
        {"nonsense": 1},
    ):
        with pytest.raises(TypeError):
            store.update_submission("s1", **fields)
    with pytest.raises(ValueError):
        store.update_submission("s1", state="bogus")


def test_a_settled_submission_never_changes_state_again(store: SQLiteStore) -> None:
    store.admit("c", "hi", submission_id="s1", now=1.0)
    store.settle("s1", Outcome.ABORTED, now=2.0)
    assert not store.update_submission("s1", state=QUEUED)
    assert store.update_submission("s1", attempts=4)  # other columns are not the outcome
    s = store.submission("s1")
    assert s is not None and (s.state, s.outcome, s.attempts) == (SETTLED, Outcome.ABORTED, 4)


# -- settlement ------------------------------------------------------------------------------------


def test_settle_first_terminal_outcome_wins(store: SQLiteStore) -> None:
    store.admit("c", "hi", submission_id="s1", now=1.0)
    store.acquire_lease("c", "k1", ttl=30)
    store.update_submission("s1", state=RUNNING, lease_owner="k1", lease_expires=31.0)
    err = {"type": "submission_aborted", "message": "stop"}
    assert store.settle("s1", Outcome.ABORTED, error=err, now=5.0)
    assert not store.settle("s1", Outcome.COMPLETED, result="late", now=6.0)
    s = store.submission("s1")
    assert s is not None
    assert (s.state, s.outcome, s.result, s.error, s.settled_at) == (
        SETTLED,
        Outcome.ABORTED,
        None,
        err,
        5.0,
    )
    assert (s.lease_owner, s.lease_expires) == (None, None)
    settlements = store.records("c", kinds=["settlement"])
    assert [(r.submission_id, r.data, r.created_at) for r in settlements] == [
        ("s1", {"outcome": "aborted", "result": None, "error": err}, 5.0)
    ]


def test_settle_unknown_submission_raises(store: SQLiteStore) -> None:
    with pytest.raises(StoreError, match="unknown submission"):
        store.settle("nope", Outcome.FAILED, now=1.0)


def test_joined_submissions_settle_with_the_response_that_absorbed_them(store: SQLiteStore) -> None:
    store.admit("c", "main", submission_id="s1", now=1.0)
    store.admit("c", "late 1", submission_id="s2", now=2.0)
    store.admit("c", "late 2", submission_id="s3", now=3.0)
    store.admit("c", "own turn", submission_id="s4", now=4.0)
    store.update_submission("s1", state=RUNNING)
    for sid in ("s2", "s3"):
        assert store.update_submission(sid, expect=[QUEUED], state=JOINING)
        assert store.update_submission(sid, expect=[JOINING], state=JOINED, joined_into="s1")
    assert store.settle("s1", Outcome.COMPLETED, result="answer", now=9.0)
    by_id = {s.id: s for s in store.submissions("c")}
    for sid in ("s1", "s2", "s3"):
        assert (by_id[sid].state, by_id[sid].outcome, by_id[sid].result, by_id[sid].settled_at) == (
            SETTLED,
            Outcome.COMPLETED,
            "answer",
            9.0,
        )
    assert by_id["s4"].state is QUEUED
    settlements = {r.submission_id: r.data for r in store.records("c", kinds=["settlement"])}
    assert settlements["s1"] == {"outcome": "completed", "result": "answer", "error": None}
    assert settlements["s2"]["joined_into"] == settlements["s3"]["joined_into"] == "s1"
    assert "s4" not in settlements
    # The absorbed ones are found by the response they joined, settled or not, in admission order.
    assert [s.id for s in store.joined_into("s1")] == ["s2", "s3"]
    assert store.joined_into("s4") == [] and store.joined_into("nope") == []
    # A joined one that somehow settled first keeps its own outcome.
    assert not store.settle("s2", Outcome.FAILED, now=10.0)


def test_joined_submission_already_settled_keeps_its_first_outcome(store: SQLiteStore) -> None:
    store.admit("c", "main", submission_id="s1", now=1.0)
    store.admit("c", "late", submission_id="s2", now=2.0)
    store.update_submission("s2", state=JOINED, joined_into="s1")
    store.settle("s2", Outcome.ABORTED, now=3.0)
    store.settle("s1", Outcome.COMPLETED, result="x", now=4.0)
    s2 = store.submission("s2")
    assert s2 is not None and (s2.outcome, s2.settled_at) == (Outcome.ABORTED, 3.0)


def test_request_abort_flags_every_unsettled_submission(store: SQLiteStore) -> None:
    for i in range(4):
        store.admit("c", f"m{i}", submission_id=f"s{i}", now=float(i))
    store.admit("other", "x", submission_id="o1", now=9.0)
    store.settle("s0", Outcome.COMPLETED, result="done", now=5.0)
    store.update_submission("s1", state=RUNNING)
    assert store.request_abort("c") == ["s1", "s2", "s3"]
    flags = {s.id: s.abort_requested for s in store.submissions("c")}
    assert flags == {"s0": False, "s1": True, "s2": True, "s3": True}
    assert store.submission("o1").abort_requested is False  # type: ignore[union-attr]
    assert store.request_abort("nobody") == []


# -- the record stream -----------------------------------------------------------------------------


def test_append_returns_records_in_order_and_upserts_state(store: SQLiteStore) -> None:
    store.admit("c", "hi", submission_id="s1", now=1.0)
    recs = store.append(
        "c",
        "s1",
        [
            ("message", {"role": "user", "text": "hi"}),
            ("state", {"name": "n", "value": 1}),
            ("step", {"call_id": "t1", "name": "fetch", "value": [1, 2]}),
            ("state", {"name": "n", "value": {"deep": [2]}}),
        ],
        now=2.0,
    )
    assert [r.kind for r in recs] == ["message", "state", "step", "state"]
    assert [r.seq for r in recs] == sorted({r.seq for r in recs})
    assert store.records("c") == recs
    assert store.state("c") == {"n": {"deep": [2]}}
    store.append("c", None, [("state", {"name": "m", "value": None})], now=3.0)
    assert store.state("c") == {"m": None, "n": {"deep": [2]}}
    assert store.state("nobody") == {}


def test_append_applies_updates_atomically_with_the_records(store: SQLiteStore) -> None:
    store.admit("c", "main", submission_id="s1", now=1.0)
    store.admit("c", "late", submission_id="s2", now=2.0)
    store.update_submission("s1", state=RUNNING)
    store.update_submission("s2", state=JOINING)
    store.append(
        "c",
        "s1",
        [("message", {"role": "user", "text": "late"})],
        now=3.0,
        updates=[SubmissionUpdate("s2", [JOINING], {"state": JOINED, "joined_into": "s1"})],
    )
    s2 = store.submission("s2")
    assert s2 is not None and (s2.state, s2.joined_into) == (JOINED, "s1")


def test_append_rolls_everything_back_when_an_expectation_fails(store: SQLiteStore) -> None:
    store.admit("c", "a", submission_id="s1", now=1.0)
    store.admit("c", "b", submission_id="s2", now=2.0)
    before = store.records("c")
    with pytest.raises(StoreError, match="'s2' is queued"):
        store.append(
            "c",
            "s1",
            [("message", {"x": 1}), ("state", {"name": "n", "value": 1})],
            now=3.0,
            updates=[
                SubmissionUpdate("s1", [QUEUED], {"state": RUNNING, "attempts": 1}),
                SubmissionUpdate("s2", [JOINING], {"state": JOINED}),
            ],
        )
    assert store.records("c") == before
    assert store.state("c") == {}
    s1 = store.submission("s1")
    assert s1 is not None and (s1.state, s1.attempts) == (QUEUED, 0)
    with pytest.raises(StoreError, match="unknown"):
        store.append("c", None, [("event", {})], now=4.0, updates=[SubmissionUpdate("ghost")])


def test_append_rejects_bad_items_without_writing(store: SQLiteStore) -> None:
    store.ensure_conversation("c", now=1.0)
    with pytest.raises(ValueError, match="unknown record kind"):
        store.append("c", None, [("event", {}), ("bogus", {})], now=2.0)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="name"):
        store.append("c", None, [("state", {"value": 1})], now=2.0)
    with pytest.raises(StoreError, match="JSON"):
        store.append("c", None, [("event", {"x": object()})], now=2.0)
    with pytest.raises(StoreError, match="JSON"):
        store.append("c", None, [("event", {"x": float("nan")})], now=2.0)
    assert store.records("c") == []


def test_records_filters(store: SQLiteStore) -> None:
    store.admit("c", "a", submission_id="s1", now=1.0)
    store.admit("c", "b", submission_id="s2", now=1.0)
    r1, r2 = store.append("c", "s1", [("system", {"text": "sys"}), ("message", {"n": 1})], now=2.0)
    (r3,) = store.append("c", "s2", [("message", {"n": 2})], now=3.0)
    (r4,) = store.append("c", None, [("compaction", {"summary": "s", "first_kept_seq": r3.seq})], now=4.0)
    store.append("other", None, [("event", {})], now=5.0)
    assert store.records("c") == [r1, r2, r3, r4]
    assert store.records("c", after_seq=r2.seq) == [r3, r4]
    assert store.records("c", kinds=["message"]) == [r2, r3]
    assert store.records("c", kinds=[]) == []
    assert store.records("c", submission_id="s2") == [r3]
    assert store.records("c", kinds=["message", "compaction"], after_seq=r2.seq) == [r3, r4]


def test_returned_objects_are_fresh_copies(store: SQLiteStore) -> None:
    data = {"nested": {"k": [1]}}
    store.admit("c", "hi", submission_id="s1", now=1.0)
    (rec,) = store.append("c", "s1", [("event", data)], now=2.0)
    data["nested"]["k"].append(2)
    rec.data["nested"]["k"].append(3)
    assert store.records("c")[0].data == {"nested": {"k": [1]}}
    sub = store.submission("s1")
    assert sub is not None
    sub.state = SETTLED
    assert store.submission("s1").state is QUEUED  # type: ignore[union-attr]
    assert store.submission("s1") is not store.submission("s1")
    partial = {"blocks": [{"text": "he"}]}
    store.put_partial("s1", partial)
    got = store.partial("s1")
    assert got == partial and got is not partial


def test_partials_put_replace_and_clear(store: SQLiteStore) -> None:
    store.admit("c", "hi", submission_id="s1", now=1.0)
    assert store.partial("s1") is None
    store.put_partial("s1", {"text": "hel"})
    store.put_partial("s1", {"text": "hello"})
    assert store.partial("s1") == {"text": "hello"}
    store.clear_partial("s1")
    assert store.partial("s1") is None
    store.clear_partial("s1")  # clearing twice is fine


# -- leases ----------------------------------------------------------------------------------------


def _expires_in(store: Any, conversation: str) -> float:
    """Seconds until the conversation's lease expires, by the store's own clock."""
    lease = store.lease(conversation)
    assert lease is not None
    return lease[1] - time.time()


def test_lease_acquire_is_exclusive_until_expiry(store: SQLiteStore) -> None:
    assert store.lease("c") is None
    assert store.acquire_lease("c", "k1", ttl=30)
    assert store.lease("c")[0] == "k1"  # type: ignore[index]
    assert 28 < _expires_in(store, "c") <= 30.5
    assert not store.acquire_lease("c", "k2", ttl=30)
    assert store.acquire_lease("c", "k1", ttl=60)  # ours: renewed
    assert 58 < _expires_in(store, "c") <= 60.5
    assert store.acquire_lease("c", "k1", ttl=0.05)
    time.sleep(0.15)
    assert store.acquire_lease("c", "k2", ttl=30)  # expired: free
    assert store.lease("c")[0] == "k2"  # type: ignore[index]


def test_a_live_lease_is_taken_only_from_the_owner_named_as_replaced(store: SQLiteStore) -> None:
    # `replacing` names an owner the caller proved dead (issue 12.8): only that one is displaced.
    assert store.acquire_lease("c", "dead", ttl=30)
    assert not store.acquire_lease("c", "k2", ttl=30, replacing="someone-else")
    assert store.acquire_lease("c", "k2", ttl=30, replacing="dead")
    assert store.lease("c")[0] == "k2"  # type: ignore[index]
    assert not store.acquire_lease("c", "k3", ttl=30, replacing="dead")


def test_a_submission_keeps_the_settings_it_was_admitted_with(store: SQLiteStore) -> None:
    settings = {"agent": "assistant", "model": "anthropic/x", "approval": "ask", "max_turns": 5}
    store.admit("c", "hi", submission_id="s1", now=1.0, settings=settings)
    store.admit("c", "plain", submission_id="s2", now=1.0)
    assert store.submission("s1").settings == settings  # type: ignore[union-attr]
    assert [s.settings for s in store.submissions("c")] == [settings, None]


def test_leases_use_the_stores_clock_not_the_callers(store: SQLiteStore) -> None:
    # A kernel whose clock runs minutes ahead (or behind) can neither steal a live lease nor
    # make its own outlive the ttl: expiry is measured by the store's clock.
    assert store.acquire_lease("c", "k1", ttl=30)
    assert not store.acquire_lease("c", "ahead", ttl=30)
    assert store.acquire_lease("d", "behind", ttl=0.05)
    time.sleep(0.15)
    assert store.acquire_lease("d", "k2", ttl=30)
    assert store.renew_lease("c", "k1", ttl=30)
    assert _expires_in(store, "c") <= 30.5


def test_release_lease_only_releases_our_own(store: SQLiteStore) -> None:
    store.acquire_lease("c", "k1", ttl=30)
    store.release_lease("c", "k2")
    assert store.lease("c")[0] == "k1"  # type: ignore[index]
    store.release_lease("c", "k1")
    assert store.lease("c") is None
    assert store.acquire_lease("c", "k2", ttl=30)
    store.release_lease("nobody", "k1")


def test_renew_lease_extends_ours_and_the_running_submissions(store: SQLiteStore) -> None:
    store.admit("c", "run", submission_id="s1", now=0.0)
    store.admit("c", "wait", submission_id="s2", now=0.0)
    store.acquire_lease("c", "k1", ttl=30)
    store.update_submission("s1", state=RUNNING, lease_owner="k1", lease_expires=30.0)
    assert store.renew_lease("c", "k1", ttl=60)
    owner, expires = store.lease("c")  # type: ignore[misc]
    assert owner == "k1" and 58 < expires - time.time() <= 60.5
    s1, s2 = store.submissions("c")
    assert (s1.lease_owner, s1.lease_expires) == ("k1", expires)
    assert (s2.lease_owner, s2.lease_expires) == (None, None)
    # Expired but nobody took it: still ours.
    assert store.renew_lease("c", "k1", ttl=0.05)
    time.sleep(0.15)
    assert store.renew_lease("c", "k1", ttl=30)


def test_renew_lease_fails_once_lost(store: SQLiteStore) -> None:
    store.admit("c", "run", submission_id="s1", now=0.0)
    store.acquire_lease("c", "k1", ttl=0.05)
    store.update_submission("s1", state=RUNNING, lease_owner="k1", lease_expires=30.0)
    time.sleep(0.15)
    assert store.acquire_lease("c", "k2", ttl=30)
    assert not store.renew_lease("c", "k1", ttl=30)
    assert store.lease("c")[0] == "k2"  # type: ignore[index]
    s1 = store.submission("s1")
    assert s1 is not None and s1.lease_owner == "k1"  # the loser did not touch it
    store.release_lease("c", "k2")
    assert not store.renew_lease("c", "k1", ttl=30)  # released is not ours either
    assert not store.renew_lease("nobody", "k1", ttl=30)


def test_owner_fence_keeps_a_writer_that_lost_its_lease_out(store: SQLiteStore) -> None:
    store.admit("c", "hi", submission_id="s1", now=0.0)
    store.acquire_lease("c", "stalled", ttl=0.05)
    store.append("c", "s1", [("event", {"n": 1})], now=0.5, owner="stalled")
    time.sleep(0.15)
    # Expired but nobody took it: still the stalled owner's, its writes are safe.
    store.append("c", "s1", [("event", {"n": 2})], now=5.0, owner="stalled")
    assert store.acquire_lease("c", "taker", ttl=30)
    assert store.settle("s1", Outcome.COMPLETED, result="taker's", now=7.0, owner="taker")
    before = store.records("c")
    with pytest.raises(SessionBusyError, match="'taker' does"):
        store.append(
            "c",
            "s1",
            [("message", {"late": True})],
            now=8.0,
            owner="stalled",
            updates=[SubmissionUpdate("s1", (), {"attempts": 9})],
        )
    assert store.records("c") == before
    assert store.submission("s1").attempts == 0  # type: ignore[union-attr]
    store.admit("c", "next", submission_id="s2", now=9.0)
    with pytest.raises(SessionBusyError):
        store.settle("s2", Outcome.FAILED, now=10.0, owner="stalled")
    assert store.submission("s2").state is QUEUED  # type: ignore[union-attr]
    assert not store.settle("s1", Outcome.FAILED, now=10.0, owner="stalled")  # first still wins
    store.release_lease("c", "taker")
    with pytest.raises(SessionBusyError, match="free"):
        store.append("c", None, [("event", {})], now=11.0, owner="taker")
    with pytest.raises(SessionBusyError):
        store.append("unknown", None, [("event", {})], now=11.0, owner="taker")


def test_owner_fence_covers_attempt_start_updates_and_partials(store: SQLiteStore) -> None:
    # Issue 12.7: a kernel that lost its lease between two attempts must not restart the
    # submission (state, attempts, lease_owner) nor overwrite its partial response.
    store.admit("c", "hi", submission_id="s1", now=0.0)
    store.acquire_lease("c", "k1", ttl=0.05)
    assert store.update_submission("s1", owner="k1", state=RUNNING, attempts=1, lease_owner="k1", lease_expires=1.0)
    store.put_partial("s1", {"text": "k1's"}, owner="k1")
    time.sleep(0.15)
    assert store.acquire_lease("c", "k2", ttl=30)
    with pytest.raises(SessionBusyError, match="'k2' does"):
        store.update_submission("s1", owner="k1", state=RUNNING, attempts=2, lease_owner="k1", lease_expires=2.0)
    with pytest.raises(SessionBusyError):
        store.put_partial("s1", {"text": "late"}, owner="k1")
    s1 = store.submission("s1")
    assert s1 is not None and (s1.attempts, s1.lease_owner) == (1, "k1")
    assert store.partial("s1") == {"text": "k1's"}
    assert store.update_submission("s1", owner="k2", attempts=2, lease_owner="k2")
    store.put_partial("s1", {"text": "k2's"}, owner="k2")
    assert store.partial("s1") == {"text": "k2's"}
    assert not store.update_submission("missing", owner="k2", attempts=1)


def test_a_settled_submissions_outcome_result_and_error_are_final(store: SQLiteStore) -> None:
    store.admit("c", "hi", submission_id="s1", now=0.0)
    store.admit("c", "hi", submission_id="s2", now=0.0)
    assert store.settle("s1", Outcome.COMPLETED, result="the answer", now=1.0)
    err = {"type": "x", "message": "first"}
    assert store.settle("s2", Outcome.FAILED, error=err, now=1.0)
    assert not store.update_submission("s1", result="rewritten")
    assert not store.update_submission("s1", error={"type": "late", "message": "m"})
    assert not store.update_submission("s2", error=None)
    assert not store.update_submission("s2", result="late", attempts=7)
    with pytest.raises(StoreError, match="nothing was appended"):
        store.append("c", None, [("event", {})], now=2.0, updates=[SubmissionUpdate("s1", (), {"result": "x"})])
    s1, s2 = store.submission("s1"), store.submission("s2")
    assert s1 is not None and (s1.outcome, s1.result, s1.error) == (Outcome.COMPLETED, "the answer", None)
    assert s2 is not None and (s2.outcome, s2.result, s2.error, s2.attempts) == (Outcome.FAILED, None, err, 0)


# -- durability and safety -------------------------------------------------------------------------


def test_everything_persists_across_reopen(db: str) -> None:
    path = db
    with reopen(path) as s:
        s.admit("c", "hi", submission_id="s1", now=1.0)
        s.acquire_lease("c", "k1", ttl=30)
        s.update_submission("s1", state=RUNNING, attempts=1, started_at=1.5)
        s.append(
            "c",
            "s1",
            [("message", {"role": "user"}), ("state", {"name": "n", "value": 7})],
            now=2.0,
        )
        s.put_partial("s1", {"text": "par"})
        s.request_abort("c")
        before = (s.submissions("c"), s.records("c"), s.state("c"), s.lease("c"), s.partial("s1"))
    with reopen(path) as s:
        assert (
            s.submissions("c"),
            s.records("c"),
            s.state("c"),
            s.lease("c"),
            s.partial("s1"),
        ) == before
        s.settle("s1", Outcome.ABORTED, now=3.0)
        seq = s.admit("c", "next", submission_id="s2", now=4.0).seq
    with reopen(path) as s:
        assert s.submission("s1").outcome is Outcome.ABORTED  # type: ignore[union-attr]
        assert seq > before[0][0].seq


def test_threads_share_one_store_safely(store: SQLiteStore) -> None:
    store.ensure_conversation("c", now=0.0)
    seqs: list[int] = []
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                seqs.extend(r.seq for r in store.append("c", None, [("event", {"t": n, "i": i})], now=1.0))
                store.records("c", after_seq=max(0, i - 5))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(seqs) == [r.seq for r in store.records("c")]
    assert len(set(seqs)) == 200


def test_store_file_never_contains_the_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-ant-api03-FAKE-KEY-" + "q7" * 20
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    path = tmp_path / ".flue" / "flue.sqlite"
    with open_store(None, cwd=str(tmp_path)) as s:
        s.admit("c", "what is 2+2?", submission_id="s1", now=1.0)
        s.acquire_lease("c", "kernel-1", ttl=30)
        s.update_submission("s1", expect=[QUEUED], state=RUNNING, attempts=1, started_at=1.0)
        s.append(
            "c",
            "s1",
            [
                ("system", {"text": "You are helpful.", "roster": {}}),
                ("message", {"role": "user", "content": "what is 2+2?"}),
            ],
            now=2.0,
        )
        s.put_partial("s1", {"text": "4"})
        s.append(
            "c",
            "s1",
            [
                ("message", {"role": "assistant", "content": "4"}),
                ("state", {"name": "answers", "value": [4]}),
            ],
            now=3.0,
        )
        s.clear_partial("s1")
        s.settle("s1", Outcome.COMPLETED, result="4", now=4.0)
        s.release_lease("c", "kernel-1")
    files = list(path.parent.iterdir())
    assert path in files
    for f in files:
        assert key.encode() not in f.read_bytes()


# -- two real processes ----------------------------------------------------------------------------

_LEASE_WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from flue_nb.runtime.store.sqlite import SQLiteStore
    db, owner, tmp, mode = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    ttl = float(sys.argv[5])
    if db.startswith("postgresql://"):
        from flue_nb.runtime.store.postgres import PostgresStore as SQLiteStore
    store = SQLiteStore(db)
    (tmp / f"ready-{owner}").touch()
    while not (tmp / "go").exists():
        time.sleep(0.005)
    out = {"owner": owner, "first": store.acquire_lease("c", owner, ttl=ttl)}
    if out["first"]:
        time.sleep(0.5)  # hold it while the other one keeps trying
        if mode == "release":
            out["released_at"] = time.time()
            store.release_lease("c", owner)
        else:
            out["expires"] = store.lease("c")[1]  # die holding it
    else:
        tries = 1
        while True:
            now = time.time()
            tries += 1
            if store.acquire_lease("c", owner, ttl=ttl):
                # After the call: the store's clock said "expired" during it, not before.
                out.update(acquired_at=time.time(), tries=tries)
                break
            time.sleep(0.01)
    store.close()
    print(json.dumps(out))
    """
)

_APPEND_WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from flue_nb.runtime.store.sqlite import SQLiteStore
    from flue_nb.runtime.store import Outcome
    db, name, tmp, n = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    if db.startswith("postgresql://"):
        from flue_nb.runtime.store.postgres import PostgresStore as SQLiteStore
    store = SQLiteStore(db)  # both open a fresh file at once: the migration must run once
    (tmp / f"ready-{name}").touch()
    while not (tmp / "go").exists():
        time.sleep(0.005)
    subs, recs = [], []
    for i in range(n):
        sid = f"{name}-{i}"
        subs.append(store.admit(name, f"msg {i}", submission_id=sid, now=time.time()).seq)
        items = [("message", {"i": i, "text": "x" * 200})] * (1 + i % 3)
        recs += [r.seq for r in store.append(name, sid, items, now=time.time())]
        if i % 2:
            store.settle(sid, Outcome.COMPLETED, result="ok", now=time.time())
        # A breath between turns, like a real run: SQLite's busy handler backs off with sleeps,
        # so a writer in a tight loop could otherwise keep the other out until it finished.
        time.sleep(0.001)
    store.close()
    print(json.dumps({"subs": subs, "recs": recs}))
    """
)


def _spawn(script: str, *args: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(flue_nb.__file__).resolve().parents[1])}
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _run_pair(tmp: Path, procs: list[subprocess.Popen[str]], names: list[str]) -> list[dict]:
    deadline = time.monotonic() + 60
    try:
        while not all((tmp / f"ready-{n}").exists() for n in names):
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                pytest.fail(f"a worker died before it was ready: {[p.communicate() for p in procs]}")
            time.sleep(0.01)
        (tmp / "go").touch()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    return [json.loads(out) for out, _ in outs]


@pytest.mark.parametrize("mode", ["release", "expire"])
def test_two_processes_contend_for_one_lease(tmp_path: Path, mode: str, db: str) -> None:
    reopen(db).close()
    ttl = 60.0 if mode == "release" else 1.0
    procs = [_spawn(_LEASE_WORKER, db, owner, tmp_path, mode, ttl) for owner in ("p1", "p2")]
    results = _run_pair(tmp_path, procs, ["p1", "p2"])
    winners = [r for r in results if r["first"]]
    losers = [r for r in results if not r["first"]]
    assert len(winners) == 1 and len(losers) == 1
    won, lost = winners[0], losers[0]
    assert lost["tries"] > 2  # it really kept trying while the winner held the lease
    if mode == "release":
        assert lost["acquired_at"] >= won["released_at"]
    else:
        assert lost["acquired_at"] >= won["expires"]
    with reopen(db) as s:
        lease = s.lease("c")
        assert lease is not None and lease[0] == lost["owner"]


def test_two_processes_appending_concurrently_lose_and_duplicate_nothing(tmp_path: Path, db: str) -> None:
    # `db` does not exist yet (or is an empty database): both processes race to create it.
    n = 300
    procs = [_spawn(_APPEND_WORKER, db, name, tmp_path, n) for name in ("a", "b")]
    results = _run_pair(tmp_path, procs, ["a", "b"])
    for r in results:
        assert r["subs"] == sorted(r["subs"]) and r["recs"] == sorted(r["recs"])
    a_recs, b_recs = results[0]["recs"], results[1]["recs"]
    # The two really ran at the same time: their seqs interleave rather than form two blocks.
    assert a_recs[0] < b_recs[-1] and b_recs[0] < a_recs[-1]
    all_subs = [s for r in results for s in r["subs"]]
    all_recs = [s for r in results for s in r["recs"]]
    assert len(set(all_subs)) == len(all_subs) == 2 * n
    per_worker = sum(1 + i % 3 for i in range(n))
    assert len(set(all_recs)) == len(all_recs) == 2 * per_worker
    if not db.startswith("postgresql://"):
        assert _query(Path(db), "PRAGMA integrity_check") == [("ok",)]
        assert _query(Path(db), "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    with reopen(db) as s:
        for name, result in zip(("a", "b"), results, strict=True):
            records = s.records(name)
            assert [r.seq for r in records if r.kind == "message"] == result["recs"]
            assert len([r for r in records if r.kind == "settlement"]) == n // 2
            assert [x.seq for x in s.submissions(name)] == result["subs"]
        stream = [r.seq for name in ("a", "b") for r in s.records(name)]
        assert len(stream) == len(set(stream))


def test_blobs_are_kept_once_by_digest_in_parts_and_read_back_whole(store: Any) -> None:
    import hashlib

    big = bytes(range(256)) * 5000  # 1.28 MB: three parts
    digest = hashlib.sha256(big).hexdigest()
    assert store.blob(digest) is None
    store.put_blob(digest, big)
    store.put_blob(digest, big)  # the same image again (another figure, another request)
    assert store.blob(digest) == big
    empty = hashlib.sha256(b"").hexdigest()
    store.put_blob(empty, b"")
    assert store.blob(empty) == b""


# -- what the store refuses (issue 20.8) -----------------------------------------------------------


def test_put_blob_refuses_bytes_whose_sha256_is_not_the_digest(store: Any) -> None:
    import hashlib

    with pytest.raises(StoreError, match="sha256"):
        store.put_blob("e" * 64, b"not these bytes")
    assert store.blob("e" * 64) is None
    first = hashlib.sha256(b"first").hexdigest()
    store.put_blob(first, b"first")
    with pytest.raises(StoreError, match="sha256"):
        store.put_blob(first, b"second")  # an existing digest with other bytes: loud, not kept
    assert store.blob(first) == b"first"


def test_put_blob_fails_loudly_when_other_bytes_are_kept_under_the_digest(store: Any) -> None:
    import hashlib

    data = b"the real image"
    digest = hashlib.sha256(data).hexdigest()
    # Bytes that do not match their digest can only be there by damage (or a writer older than
    # the check): plant some through the store's own transaction.
    store._run(
        lambda tx: tx.run("INSERT INTO blobs (digest, part, data) VALUES (?, 0, ?)", (digest, b"damaged")), write=True
    )
    with pytest.raises(StoreError, match="damaged"):
        store.put_blob(digest, data)
    assert store.blob(digest) == b"damaged"  # nothing was overwritten or mixed in


def test_append_refuses_a_record_naming_a_submission_of_another_conversation(store: Any) -> None:
    store.admit("c", "mine", submission_id="s1", now=1.0)
    store.admit("d", "theirs", submission_id="s2", now=1.0)
    with pytest.raises(StoreError, match="'s2' belongs to conversation 'd', not 'c'"):
        store.append("c", "s2", [("message", {"x": 1})], now=2.0)
    with pytest.raises(StoreError, match="'s2' belongs to conversation 'd'"):
        store.append("c", "s1", [("message", {"x": 1})], now=2.0, updates=[SubmissionUpdate("s2", (), {"attempts": 3})])
    with pytest.raises(StoreError, match="'nobody' is unknown"):
        store.append("c", "nobody", [("message", {"x": 1})], now=2.0)
    assert store.records("c") == [] and store.records("d") == []
    assert store.submission("s2").attempts == 0  # type: ignore[union-attr]
    assert [r.submission_id for r in store.append("c", "s1", [("message", {"x": 1})], now=3.0)] == ["s1"]


def test_conversations_lists_each_with_its_outcomes_oldest_first(store: Any) -> None:
    assert store.conversations() == []
    store.ensure_conversation("old", now=1.0)
    store.admit("new", "a", submission_id="s1", now=5.0)
    store.admit("new", "b", submission_id="s2", now=6.0)
    store.admit("new", "c", submission_id="s3", now=7.0)
    store.settle("s1", Outcome.COMPLETED, result="ok", now=8.0)
    store.settle("s2", Outcome.FAILED, error={"type": "x", "message": "m"}, now=8.0)
    listed = store.conversations()
    assert [(c.id, c.created_at) for c in listed] == [("old", 1.0), ("new", 5.0)]
    old, new = listed
    assert (old.submissions, old.completed, old.failed, old.aborted, old.unsettled) == (0, 0, 0, 0, 0)
    assert (new.submissions, new.completed, new.failed, new.aborted, new.unsettled) == (3, 1, 1, 0, 1)
