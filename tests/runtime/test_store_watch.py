"""`Store.watch`: PostgreSQL wakes a view by notification (LISTEN/NOTIFY), SQLite by a short poll.

A second store object on the same database stands for another process: it has its own
connection, so what it commits reaches the first one only through the server (or the file).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.store import SubmissionState, SubmissionUpdate
from flue_nb.runtime.store.sqlite import SQLiteStore


def _pg(url: str) -> Any:
    from flue_nb.runtime.store.postgres import PostgresStore

    return PostgresStore(url)


def _listening(store: Any) -> None:
    for _ in range(200):
        if store._listener is not None and store._listener.listening:
            return
        time.sleep(0.05)
    raise AssertionError("the LISTEN connection never came up")


def test_postgres_watch_wakes_on_each_kind_of_write_by_notification(pg_url: str) -> None:
    viewer, writer = _pg(pg_url), _pg(pg_url)
    try:
        watch = viewer.watch("c")
        _listening(viewer)
        watch.wait(0.3)  # the wake-up of the connection coming up
        sub = writer.admit("c", "hello", submission_id="s1", now=1.0)
        assert watch.wait(30), "no notification for an admission"
        writer.update_submission(sub.id, expect=[SubmissionState.QUEUED], state=SubmissionState.RUNNING)
        assert watch.wait(30), "no notification for a submission's state"
        writer.append("c", sub.id, [("event", {"note": 1})], now=2.0)
        assert watch.wait(30), "no notification for an append"
        assert writer.acquire_lease("c", "w", ttl=30)
        assert watch.wait(30), "no notification for a lease taken"
        writer.release_lease("c", "w")
        assert watch.wait(30), "no notification for a lease released"
        writer.request_abort("c")
        assert watch.wait(30), "no notification for an abort"
        from flue_nb.runtime.store import Outcome

        writer.settle(sub.id, Outcome.ABORTED, now=3.0)
        assert watch.wait(30), "no notification for a settlement"
        # Woken by notifications, not by a poll: a NotifyWatch says False at a timeout.
        assert viewer._listener.notified >= 7
        assert watch.wait(0.5) is False
    finally:
        viewer.close()
        writer.close()


def test_postgres_watch_ignores_other_conversations_and_rolled_back_writes(pg_url: str) -> None:
    viewer, writer = _pg(pg_url), _pg(pg_url)
    try:
        watch = viewer.watch("mine")
        _listening(viewer)
        watch.wait(0.3)
        writer.admit("other", "x", submission_id="o1", now=1.0)
        sub = writer.admit("mine", "y", submission_id="m1", now=1.0)
        assert watch.wait(30)
        before = viewer._listener.notified
        with pytest.raises(StoreError):
            # The expectation fails: nothing is written, so nothing is announced.
            writer.append(
                "mine",
                sub.id,
                [("event", {"x": 1})],
                now=2.0,
                updates=[SubmissionUpdate(sub.id, expect=[SubmissionState.RUNNING], fields={"attempts": 1})],
            )
        writer.admit("other", "z", submission_id="o2", now=3.0)
        assert watch.wait(1.0) is False
        assert viewer._listener.notified > before  # the other conversation's notice arrived, unseen
    finally:
        viewer.close()
        writer.close()


def test_postgres_watch_polls_while_the_listen_connection_is_lost_then_listens_again(pg_url: str) -> None:
    import psycopg

    viewer, writer = _pg(pg_url), _pg(pg_url)
    try:
        watch = viewer.watch("c")
        _listening(viewer)
        listener = viewer._listener
        connect = listener._connect

        def away() -> Any:
            raise psycopg.OperationalError("the server is away (test)")

        listener._connect = away  # the server stays away until we put it back
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'flue_nb listen'"
            )
        for _ in range(200):
            if not listener.listening:
                break
            time.sleep(0.02)
        assert not listener.listening
        # Lost: the watch says "look" every poll interval, quietly (no error reaches the caller).
        woke = [watch.wait(5.0) for _ in range(4)]
        assert all(woke), woke
        listener._connect = connect
        _listening(viewer)  # reconnected on its own
        watch.wait(0.3)
        writer.admit("c", "after", submission_id="s2", now=1.0)
        assert watch.wait(30)
    finally:
        viewer.close()
        writer.close()


def test_sqlite_watch_is_a_short_poll_and_close_ends_a_wait(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite")
    try:
        watch = store.watch("c")
        assert watch.wait(5.0) is True  # every half second: look
        done: list[bool] = []
        t = threading.Thread(target=lambda: done.append(watch.wait(60.0)))
        watch2 = store.watch("c")
        t2 = threading.Thread(target=lambda: done.append(watch2.wait(60.0)))
        t.start()
        t2.start()
        watch2.close()
        t2.join(10)
        assert not t2.is_alive() and done == [False]
        watch.close()
        t.join(10)
        assert watch.wait(60.0) is False  # closed: at once
    finally:
        store.close()


def test_postgres_close_ends_a_waiting_watch(pg_url: str) -> None:
    viewer = _pg(pg_url)
    watch = viewer.watch("c")
    _listening(viewer)
    watch.wait(0.3)
    done: list[bool] = []
    t = threading.Thread(target=lambda: done.append(watch.wait(60.0)))
    t.start()
    watch.close()
    t.join(10)
    viewer.close()
    assert not t.is_alive() and done == [False]
