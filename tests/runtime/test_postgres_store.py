"""What `PostgresStore` adds to the shared contract (test_store.py): URL selection, masking,
migrations, per-user ids and faults of a real server (stopped and started mid-run)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from agents import make_agent

import flue_nb as flue
from flue_nb.models import FunctionModel, reply
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.store import Outcome, SubmissionState
from flue_nb.runtime.store._rows import Migration
from flue_nb.runtime.store.url import mask_url

pytestmark = pytest.mark.usefixtures("pg_server")


def _store(url: str, **kw: Any) -> Any:
    from flue_nb.runtime.store.postgres import PostgresStore

    return PostgresStore(url, **kw)


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


_RUN = (
    "import flue_nb as flue\n"
    "from flue_nb.models import ScriptedModel\n"
    "@flue.agent\n"
    "def a():\n"
    "    flue.use_model(ScriptedModel(['hi']))\n"
    "    flue.use_sandbox(flue.local('.'))\n"
    "print(flue.init(a, db={db!r}, conversation='c').prompt('hello'))\n"
)


# -- selecting the backend -------------------------------------------------------------------------


def test_sqlite_runs_never_import_psycopg(tmp_path: Any) -> None:
    mods = _modules_after(_RUN.format(db=str(tmp_path / "s.sqlite")))
    assert not {m for m in mods if m.startswith("psycopg")}


def test_a_postgresql_url_selects_the_postgres_store(pg_url: str) -> None:
    mods = _modules_after(_RUN.format(db=pg_url))
    assert {"psycopg", "flue_nb.runtime.store.postgres"} <= mods
    with _store(pg_url) as s:
        assert [sub.result for sub in s.submissions("c")] == ["hi"]


def test_flue_db_environment_variable_selects_the_store(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUE_DB", pg_url)
    model = FunctionModel(lambda request: reply("from FLUE_DB"))
    session = flue.init(make_agent(model), conversation="env")
    assert type(session.store).__name__ == "PostgresStore"
    assert session.prompt("hi") == "from FLUE_DB"


# -- credentials -----------------------------------------------------------------------------------


def test_mask_url_hides_passwords_only() -> None:
    assert mask_url("postgresql://ann:s3cret@db:5432/flue") == "postgresql://ann:***@db:5432/flue"
    assert mask_url("postgresql://ann@db/flue?password=s3cret&sslmode=require") == (
        "postgresql://ann@db/flue?password=***&sslmode=require"
    )
    assert mask_url("postgresql://db/flue") == "postgresql://db/flue"


def test_the_password_never_reaches_repr_errors_or_stored_rows(pg_server: Any) -> None:
    secret = "s3cret-pw-" + "x" * 8
    url = pg_server.create_database().replace("postgres@", f"postgres:{secret}@")
    with _store(url) as s:  # the test server trusts loopback, so any password connects
        assert secret not in repr(s) and secret not in s.url and "***" in s.url
        s.admit("c", "hi", submission_id="s1", now=1.0)
        dumped = repr((s.submissions("c"), s.records("c")))
        assert secret not in dumped
    unreachable = f"postgresql://postgres:{secret}@127.0.0.1:1/nowhere"
    with pytest.raises(StoreError) as caught:
        _store(unreachable, reconnect_timeout=0.5, connect_timeout=1)
    assert secret not in str(caught.value) and "***" in str(caught.value)
    assert secret not in repr(caught.value.to_dict())


# -- schema versions -------------------------------------------------------------------------------


def _version(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return int(conn.execute("SELECT version FROM flue.schema_version").fetchone()[0])


def test_a_fresh_database_is_migrated_to_the_current_version(pg_url: str) -> None:
    from flue_nb.runtime.store._pg_schema import SCHEMA_VERSION

    with _store(pg_url) as s:
        s.admit("c", "hi", submission_id="s1", now=1.0)
    assert _version(pg_url) == SCHEMA_VERSION


def test_forward_migration_keeps_data_and_a_failed_one_rolls_back(pg_url: str) -> None:
    import psycopg

    from flue_nb.runtime.store._pg_schema import MIGRATIONS, SCHEMA_VERSION, migrate

    with _store(pg_url) as s:
        s.admit("c", "kept", submission_id="s1", now=1.0)
    extra = Migration(SCHEMA_VERSION + 1, ("CREATE TABLE extra (x integer)", "INSERT INTO extra VALUES (42)"))
    broken = Migration(SCHEMA_VERSION + 2, ("CREATE TABLE half (x integer)", "NOT SQL"))
    with psycopg.connect(pg_url, autocommit=True, options="-c search_path=flue") as conn:
        assert migrate(conn, "db", (*MIGRATIONS, extra)) == SCHEMA_VERSION + 1
        assert migrate(conn, "db", (*MIGRATIONS, extra)) == SCHEMA_VERSION + 1  # a no-op
        assert conn.execute("SELECT x FROM extra").fetchall() == [(42,)]
        with pytest.raises(psycopg.errors.SyntaxError):
            migrate(conn, "db", (*MIGRATIONS, extra, broken))
        assert conn.execute("SELECT to_regclass('flue.half')").fetchone() == (None,)
    assert _version(pg_url) == SCHEMA_VERSION + 1


def test_a_newer_schema_version_is_refused_and_says_upgrade(pg_url: str) -> None:
    import psycopg

    from flue_nb.runtime.store._pg_schema import SCHEMA_VERSION

    _store(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE flue.schema_version SET version = %s", (SCHEMA_VERSION + 5,))
    with pytest.raises(StoreError, match="upgrade flue_nb"):
        _store(pg_url)


# -- per-user conversation ids ---------------------------------------------------------------------


def test_conversation_ids_are_per_user_unless_a_namespace_is_named(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "ann")
    ann = _store(pg_url)
    bob = _store(pg_url, user="bob")
    try:
        assert ann.user == "ann"
        ann.admit("c", "ann's", submission_id="a1", now=1.0)
        bob.admit("c", "bob's", submission_id="b1", now=1.0)
        assert [s.text for s in ann.submissions("c")] == ["ann's"]
        assert [s.text for s in bob.submissions("c")] == ["bob's"]
        assert ann.submission("a1").conversation_id == "c"  # type: ignore[union-attr]
        ann.append("team:weekly-report", None, [("event", {"by": "ann"})], now=2.0)
        bob.append("team:weekly-report", None, [("event", {"by": "bob"})], now=3.0)
        shared = bob.records("team:weekly-report")
        assert [r.data["by"] for r in shared] == ["ann", "bob"]
        assert {r.conversation_id for r in shared} == {"team:weekly-report"}
        assert ann.acquire_lease("c", "k-ann", ttl=30)
        assert bob.acquire_lease("c", "k-bob", ttl=30)  # a different conversation
        # Each lists its own conversations and the namespaced ones, never the other's.
        assert [c.id for c in ann.conversations()] == ["c", "team:weekly-report"]
        assert [(c.id, c.submissions) for c in bob.conversations()] == [("c", 1), ("team:weekly-report", 0)]
    finally:
        ann.close()
        bob.close()


# -- faults ----------------------------------------------------------------------------------------


@pytest.fixture
def own_server() -> Any:
    """A server of this test's own, to stop and start without disturbing the others."""
    from tests.pg import PgServer

    server = PgServer().start()
    yield server
    server.destroy()


def test_a_dropped_connection_is_reestablished(own_server: Any) -> None:
    url = own_server.create_database()
    with _store(url) as s:
        s.admit("c", "before", submission_id="s1", now=1.0)
        own_server.stop("immediate")
        own_server.start()
        s.admit("c", "after", submission_id="s2", now=2.0)  # retried on a fresh connection
        assert [x.id for x in s.submissions("c")] == ["s1", "s2"]


def test_a_server_that_stays_down_is_a_clear_store_error_not_a_hang(own_server: Any) -> None:
    url = own_server.create_database()
    s = _store(url, reconnect_timeout=1.0, connect_timeout=1)
    try:
        own_server.stop("immediate")
        started = time.monotonic()
        with pytest.raises(StoreError, match="cannot reach the store"):
            s.admit("c", "lost?", submission_id="s1", now=1.0)
        assert time.monotonic() - started < 15
        own_server.start()
        assert s.submissions("c") == []  # nothing half-written; the store works again
        s.admit("c", "again", submission_id="s1", now=2.0)
        assert len(s.submissions("c")) == 1
    finally:
        s.close()


def test_a_locked_row_ends_in_a_store_error_at_the_statement_timeout(pg_url: str) -> None:
    import psycopg

    with _store(pg_url, statement_timeout=0.5) as s:
        s.admit("c", "hi", submission_id="s1", now=1.0)
        other = psycopg.connect(pg_url)
        try:
            other.execute("SELECT * FROM flue.conversations FOR UPDATE")  # holds the row lock
            started = time.monotonic()
            with pytest.raises(StoreError, match="timeout|locked"):
                s.append("c", "s1", [("event", {})], now=2.0)
            assert time.monotonic() - started < 5
            other.rollback()
            s.append("c", "s1", [("event", {})], now=3.0)  # usable again once the lock is gone
        finally:
            other.close()


def test_a_server_restart_mid_run_settles_once_with_nothing_lost_or_duplicated(own_server: Any) -> None:
    url = own_server.create_database()
    restarted = threading.Event()

    def answer(request: Any) -> Any:
        if not restarted.is_set():
            own_server.stop("immediate")
            time.sleep(0.5)
            own_server.start()
            restarted.set()
        return reply(f"answer {len(request.messages)}")

    session = flue.init(
        make_agent(FunctionModel(answer)), conversation="c", db=url, settings=RunSettings(sleep=_no_sleep)
    )
    receipts = [session.dispatch(f"message {i}") for i in range(3)]
    outcomes = [session.read(r, timeout=60) for r in receipts]
    assert restarted.is_set()
    assert all(o.startswith("answer") for o in outcomes)
    with _store(url) as s:
        subs = s.submissions("c")
        assert [x.state for x in subs] == [SubmissionState.SETTLED] * 3
        assert all(x.outcome is Outcome.COMPLETED for x in subs)
        settlements = s.records("c", kinds=["settlement"])
        assert sorted(r.submission_id for r in settlements) == sorted(r.submission_id for r in receipts)
        users = [r.data for r in s.records("c", kinds=["message"]) if r.data.get("kind") == "user"]
        assert len(users) == 3  # every message stored once


async def _no_sleep(seconds: float) -> None:
    return None


def test_a_wrong_database_name_fails_at_once_instead_of_retrying(pg_server: Any) -> None:
    started = time.monotonic()
    with pytest.raises(StoreError, match="no_such_db"):
        _store(pg_server.url("no_such_db"), reconnect_timeout=30)
    assert time.monotonic() - started < 10  # not the 30 s a server that is away gets


def test_a_url_with_a_role_option_creates_the_tables_as_that_role(pg_server: Any) -> None:
    import psycopg

    url = pg_server.create_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DO $$ BEGIN CREATE ROLE team NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        conn.execute("GRANT CREATE ON DATABASE " + url.rsplit("/", 1)[1] + " TO team")
    with _store(url + "?options=-c%20role%3Dteam") as s:
        s.admit("team:weekly-report", "hi", submission_id="s1", now=1.0)
    with psycopg.connect(url) as conn:
        owners = {row[0] for row in conn.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'flue'")}
    assert owners == {"team"}


def test_a_connection_the_server_terminated_is_replaced_at_the_next_call(pg_url: str) -> None:
    import psycopg

    with _store(pg_url) as s:
        s.admit("c", "before", submission_id="s1", now=1.0)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'flue_nb' AND datname = current_database()"
            ).fetchall()
        assert killed == [(True,)]
        s.admit("c", "after", submission_id="s2", now=2.0)
        assert [x.text for x in s.submissions("c")] == ["before", "after"]


def test_a_server_gone_for_good_mid_run_ends_the_read_in_a_store_error_and_nothing_is_lost(
    own_server: Any,
) -> None:
    url = own_server.create_database()
    gone = threading.Event()

    def answer(request: Any) -> Any:
        if not gone.is_set():
            own_server.stop("immediate")
            gone.set()
        return reply("answered")

    store = _store(url, reconnect_timeout=1.0, connect_timeout=1)
    session = flue.init(
        make_agent(FunctionModel(answer)),
        conversation="c",
        db=store,
        settings=RunSettings(sleep=_no_sleep),
        lease_ttl=1.0,
    )
    receipt = session.dispatch("hi")
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot reach the store"):
        session.read(receipt, timeout=60)
    # Each store call after the first wait tries once: the failure is not paid per call.
    assert time.monotonic() - started < 15
    own_server.start()
    later = flue.init(
        make_agent(FunctionModel(lambda request: reply("recovered"))),
        conversation="c",
        db=url,
        settings=RunSettings(sleep=_no_sleep),
        lease_ttl=1.0,
    )
    assert later.read(receipt.submission_id, timeout=60) == "recovered"
    with _store(url) as s:
        (sub,) = s.submissions("c")
        assert (sub.state, sub.outcome) == (SubmissionState.SETTLED, Outcome.COMPLETED)
        assert [r.submission_id for r in s.records("c", kinds=["settlement"])] == [sub.id]
