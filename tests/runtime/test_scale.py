"""A long conversation costs what a short one does (issue 37): indexes, pages, no full scans.

Conversations of thousands of submissions are built by direct store writes (`build`), as a
long-lived conversation leaves them; no test here times anything (bench/scale.py does).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, cast

import pytest

import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call
from flue_nb.runtime.core import tally
from flue_nb.runtime.core.replay import rebuild_events, rebuild_page
from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.messages import ToolResultMessage
from flue_nb.runtime.providers import price_of
from flue_nb.runtime.session import StoredConversation
from flue_nb.runtime.store import Outcome, Store, SubmissionState, SubmissionUpdate, _pg_schema
from flue_nb.runtime.store._sqlite_schema import MIGRATIONS, migrate
from flue_nb.runtime.store.sqlite import SQLiteStore
from flue_nb.runtime.store.url import open_any


def _reading_model(model_id: str = "function") -> FunctionModel:
    def fn(request: Any) -> Any:
        if request.messages and isinstance(request.messages[-1], ToolResultMessage):
            return reply("done", usage=(200, 5))
        return reply("", tool_call("read", path="small.txt"), usage=(200, 5))

    return FunctionModel(fn, id=model_id)


def _agent(tmp_path: Path, model_id: str = "function") -> Any:
    (tmp_path / "small.txt").write_text("hello\n")
    model = _reading_model(model_id)

    @flue.agent
    def reader() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.local(tmp_path))
        return "Read."

    return reader


def build(store: Store, cid: str, n: int, *, t0: float = 1_000.0, unsettled: int = 0) -> None:
    """`n` settled submissions (each a read and an answer) and `unsettled` queued ones after them."""
    store.ensure_conversation(cid, now=t0)
    store.append(cid, None, [("system", {"text": "Read.", "roster": None})], now=t0)
    for i in range(n):
        sid, t = f"{cid}-{i:05d}", t0 + 1 + i
        store.admit(cid, f"read it {i}", submission_id=sid, now=t)
        call = f"call-{cid}-{i}"
        items: list[tuple[Any, dict[str, Any]]] = [
            ("event", {"attempt": 1, "agent": "reader"}),
            ("message", {"kind": "user", "text": f"read it {i}", "submission_id": sid}),
            (
                "message",
                {
                    "kind": "assistant",
                    "parts": [{"kind": "tool_call", "id": call, "name": "read", "input": {"path": "small.txt"}}],
                    "stop_reason": "tool_use",
                },
            ),
            (
                "message",
                {"kind": "tool_result", "call_id": call, "name": "read", "content": "hello", "is_error": False},
            ),
            (
                "message",
                {"kind": "assistant", "parts": [{"kind": "text", "text": f"done {i}"}], "stop_reason": "end_turn"},
            ),
        ]
        running = SubmissionUpdate(sid, fields={"state": SubmissionState.RUNNING, "attempts": 1, "started_at": t})
        store.append(cid, sid, items, now=t + 0.1, updates=[running])
        store.settle(sid, Outcome.COMPLETED, result=f"done {i}", now=t + 0.2)
    for j in range(unsettled):
        store.admit(cid, f"later {j}", submission_id=f"{cid}-q{j:05d}", now=t0 + n + 2 + j)


def bulk_build(path: Path, cid: str, n: int, *, t0: float) -> None:
    """`build`'s conversation written in one SQLite transaction (seconds, not a minute, at 10,000)."""
    with SQLiteStore(path) as store:
        build(store, cid, 1, t0=t0)  # the conversation, its system prompt, one submission's records
        template = [(r.kind, json.dumps(r.data)) for r in store.records(cid) if r.submission_id == f"{cid}-00000"]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    for i in range(1, n):
        sid, t = f"{cid}-{i:05d}", t0 + 1 + i
        conn.execute(
            "INSERT INTO submissions (id, conversation_id, text, state, accepted_at, attempts, started_at, outcome,"
            " result, settled_at) VALUES (?, ?, ?, 'settled', ?, 1, ?, 'completed', ?, ?)",
            (sid, cid, f"read it {i}", t, t, f"done {i}", t + 0.2),
        )
        rows = [(cid, sid, kind, _renumbered(data, cid, i), t + 0.1) for kind, data in template]
        conn.executemany(
            "INSERT INTO records (conversation_id, submission_id, kind, data, created_at) VALUES (?, ?, ?, ?, ?)", rows
        )
    conn.execute("COMMIT")
    conn.close()
    with SQLiteStore(path) as store:
        # Compacted, as a conversation this long is: the window holds a summary, not 40,000 messages.
        summary = {"summary": f"Read small.txt {n} times.", "first_kept_seq": store.records(cid)[-1].seq + 1}
        store.append(cid, None, [("compaction", {**summary, "reason": "threshold"})], now=t0 + n + 1)


def _renumbered(data: str, cid: str, i: int) -> str:
    """A record of the first submission's as the `i`th's (its ids, its question and its answer)."""
    for old, new in (
        (f"{cid}-00000", f"{cid}-{i:05d}"),
        (f'"call-{cid}-0"', f'"call-{cid}-{i}"'),
        ("read it 0", f"read it {i}"),
        ('"done 0"', f'"done {i}"'),
    ):
        data = data.replace(old, new)
    return data


def _plan(path: Path, sql: str, params: tuple[Any, ...]) -> str:
    conn = sqlite3.connect(path)
    try:
        return " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    finally:
        conn.close()


def test_the_unsettled_submissions_are_read_by_their_own_index(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with SQLiteStore(path) as store:
        build(store, "c", 30, unsettled=2)
        assert [s.id for s in store.submissions("c", unsettled=True)] == ["c-q00000", "c-q00001"]
    plan = _plan(
        path,
        "SELECT id FROM submissions WHERE conversation_id = ? AND state <> 'settled' ORDER BY seq",
        ("c",),
    )
    assert "USING INDEX submissions_unsettled" in plan, plan
    renew = _plan(
        path,
        "UPDATE submissions SET lease_owner = 'x' WHERE conversation_id = ? AND state <> 'settled' AND state = ?",
        ("c", "running"),
    )
    assert "USING INDEX submissions_unsettled" in renew, renew
    page = _plan(
        path, "SELECT id FROM submissions WHERE conversation_id = ? AND seq < ? ORDER BY seq DESC LIMIT 5", ("c", 9)
    )
    assert "USING INDEX submissions_by_conversation" in page and "TEMP B-TREE" not in page, page


def test_a_store_file_of_the_previous_schema_opens_and_gains_the_index(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    before = tuple(m for m in MIGRATIONS if m.version < 5)  # the schema before the index
    assert migrate(conn, str(path), before) == 4
    conn.close()
    with SQLiteStore(path) as store:
        build(store, "c", 3, unsettled=1)
        assert [s.id for s in store.submissions("c", unsettled=True)] == ["c-q00000"]
    indexes = {name for (name,) in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "submissions_unsettled" in indexes


def test_pages_of_submissions_and_records_are_read_by_bounds(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        build(store, "c", 12)
        last = store.submissions("c", last=5)
        assert [s.id for s in last] == [f"c-{i:05d}" for i in range(7, 12)]
        before = store.submissions("c", last=5, before_seq=last[0].seq)
        assert [s.id for s in before] == [f"c-{i:05d}" for i in range(2, 7)]
        assert store.count_submissions("c") == 12
        assert store.count_submissions("c", before_seq=last[0].seq) == 7
        everything = store.records("c")
        middle = store.records("c", after_seq=everything[3].seq, before_seq=everything[6].seq)
        assert [r.seq for r in middle] == [r.seq for r in everything[4:6]]


class _Steps:
    """Counts the SQLite virtual machine's instructions run on every connection opened after it is
    installed: what a statement costs, deterministically (a COUNT over an index range runs one
    loop per entry; a lookup, the same few instructions however long the conversation)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        connect = sqlite3.connect

        def counting(*args: Any, **kw: Any) -> sqlite3.Connection:
            conn = connect(*args, **kw)
            conn.set_progress_handler(self._step, 1)
            return conn

        monkeypatch.setattr(sqlite3, "connect", counting)

    def _step(self) -> int:
        self.n += 1
        return 0  # go on

    def of(self, fn: Any) -> int:
        """The instructions `fn()` ran."""
        before = self.n
        fn()
        return self.n - before


def test_counting_the_submissions_before_one_reads_the_same_at_20_and_at_5000(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "N earlier not shown" (history, a chat's page, its static copy) is the number the store gave
    # the submission before the page (migration 7): one lookup, not a COUNT over all of them.
    path = tmp_path / "s.sqlite"
    bulk_build(path, "short", 20, t0=1_000.0)
    bulk_build(path, "long", 5_000, t0=2_000.0)
    steps = _Steps(monkeypatch)
    with SQLiteStore(path) as store:
        cost = {}
        for cid, n in (("short", 20), ("long", 5_000)):
            page = store.submissions(cid, last=5)
            assert store.count_submissions(cid) == n
            assert store.count_submissions(cid, before_seq=page[0].seq) == n - 5
            assert store.count_submissions(cid, before_seq=page[0].seq - 1) == n - 6
            cost[cid] = (
                steps.of(lambda cid=cid: store.count_submissions(cid)),
                steps.of(lambda cid=cid, seq=page[0].seq: store.count_submissions(cid, before_seq=seq)),
            )
        assert store.count_submissions("short", before_seq=1) == 0
        assert store.count_submissions("nobody") == 0
    assert cost["long"] == cost["short"], cost


def test_a_turn_a_status_a_page_and_history_read_the_same_at_50_and_at_5000(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store work of each, in SQLite instructions (no clock), on two conversations of one file
    # that differ only in length: a scan of a conversation's submissions or records, or a COUNT,
    # anywhere on these paths makes the long one's figure grow with it.
    from flue_nb import cli

    path = tmp_path / "s.sqlite"
    bulk_build(path, "short", 50, t0=1_000.0)
    bulk_build(path, "long", 5_000, t0=10_000.0)
    steps = _Steps(monkeypatch)
    agent = _agent(tmp_path)
    cost: dict[str, dict[str, int]] = {}
    for cid in ("short", "long"):
        s = flue.init(agent, db=str(path), cwd=str(tmp_path), conversation=cid)
        assert s.prompt("read it") == "done"  # the first turn reads the window; the first status folds
        s.status()
        cost[cid] = {
            "turn": steps.of(lambda s=s: s.prompt("read it")),
            "status": steps.of(s.status),
            "page": steps.of(lambda s=s, cid=cid: rebuild_page(s.store, cid, last=10)),
            "history": steps.of(lambda cid=cid: cli.history(str(path), cid)),
        }
    # Within an instruction or two: SQLite's progress handler is called every so many
    # instructions, not exactly at each. A COUNT over the long one's 5,000 runs thousands more.
    assert all(cost["long"][op] <= cost["short"][op] + 5 for op in cost["short"]), cost


def test_on_postgresql_a_turn_a_status_and_history_touch_the_same_pages_at_50_and_2000(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PostgreSQL's figure: the shared buffers each statement touches (EXPLAIN ANALYZE, BUFFERS),
    # summed over what a turn, a status and history run. A COUNT, or a plan the planner turned
    # into a scan of the conversation's submissions or records, grows with the long one.
    import psycopg

    from flue_nb import cli
    from flue_nb.runtime.store import _dialect

    store = open_any(pg_url, cwd=str(tmp_path))
    try:
        build(store, "team:short", 50)
        build(store, "team:long", 2_000, t0=5_000.0)
        ran: list[tuple[str, tuple[Any, ...]]] = []
        run = _dialect.Tx.run

        def recording(tx: Any, statement: str, params: Any = ()) -> Any:
            # This store's statements only: a SQLite store another test of this worker left open
            # (a follower still reading) runs its own meanwhile (failed once so in a loaded run).
            if tx.d.name == "postgres":
                ran.append((tx.d.sql(statement), tuple(params)))
            return run(tx, statement, params)

        monkeypatch.setattr(_dialect.Tx, "run", recording)
        with psycopg.connect(pg_url, autocommit=True, options="-c search_path=flue") as conn:
            # A database that lives long has been vacuumed and analyzed (autovacuum); one built a
            # moment ago holds every old row version and no statistics.
            conn.execute("VACUUM ANALYZE")

            def pages(fn: Any) -> int:
                ran.clear()
                fn()
                touched = 0
                for sql, params in list(ran):
                    if not sql.startswith("SELECT") or "FOR UPDATE" in sql or "pg_notify" in sql:
                        continue  # writes and locks: the same rows whatever the length
                    [(plan,)] = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchall()
                    touched += plan[0]["Plan"].get("Shared Hit Blocks", 0) + plan[0]["Plan"].get(
                        "Shared Read Blocks", 0
                    )
                return touched

            agent = _agent(tmp_path)
            cost: dict[str, dict[str, int]] = {}
            for cid in ("team:short", "team:long"):
                s = flue.init(agent, db=store, cwd=str(tmp_path), conversation=cid)
                assert s.prompt("read it") == "done"
                s.status()
                cost[cid] = {
                    "turn": pages(lambda s=s: s.prompt("read it")),
                    "status": pages(s.status),
                    "history": pages(lambda cid=cid: cli.history(pg_url, cid)),
                }
    finally:
        store.close()  # a failure here must not leave its connections to the next test
    # A B-tree one level deeper may cost a page more per lookup; a scan costs dozens.
    assert all(cost["team:long"][op] <= cost["team:short"][op] + 10 for op in cost["team:short"]), cost


def test_a_store_of_schema_6_numbers_its_submissions_when_migrated(db: str, tmp_path: Path) -> None:
    # Two conversations' submissions interleaved, written by a flue_nb of schema 6; then, on the
    # migrated store, one admitted as this flue_nb does and one inserted as an older one would.
    # Namespaced ids, which PostgreSQL stores as they are (not under the user's name).
    def rows(conn: Any, sql: str, *params: Any) -> None:
        if db.startswith("postgresql"):  # free text is a JSON string there
            conn.execute(sql.format(text="to_json(?::text)").replace("?", "%s"), params)
        else:
            conn.execute(sql.format(text="?"), params)

    insert = (
        "INSERT INTO submissions (id, conversation_id, text, state, accepted_at) VALUES (?, ?, {text}, 'queued', 1)"
    )
    conn = _connect(db)
    if db.startswith("postgresql"):
        assert _pg_schema.migrate(conn, "db", _pg_schema.MIGRATIONS[:6]) == 6
    else:
        assert migrate(conn, db, MIGRATIONS[:6]) == 6
    try:
        for cid in ("team:a", "team:b"):
            rows(conn, "INSERT INTO conversations (id, created_at) VALUES (?, 1)", cid)
        for i in range(7):
            rows(conn, insert, f"s{i}", "team:a" if i % 3 == 0 else "team:b", f"hi {i}")
    finally:
        conn.close()
    store = open_any(db, cwd=str(tmp_path))
    try:
        a, b = store.submissions("team:a"), store.submissions("team:b")
        assert [s.id for s in a] == ["s0", "s3", "s6"] and len(b) == 4
        assert [store.count_submissions("team:a", before_seq=s.seq + 1) for s in a] == [1, 2, 3]
        assert [store.count_submissions("team:b", before_seq=s.seq + 1) for s in b] == [1, 2, 3, 4]
        store.admit("team:a", "new", submission_id="s7", now=2.0)
        assert store.count_submissions("team:a") == 4 and store.count_submissions("team:b") == 4
    finally:
        store.close()
    conn = _connect(db)
    try:
        rows(conn, insert, "s8", "team:b", "as an older flue_nb writes it")
    finally:
        conn.close()
    store = open_any(db, cwd=str(tmp_path))
    try:
        assert store.count_submissions("team:b") == 5 and store.count_submissions("team:a") == 4
    finally:
        store.close()


def _connect(db: str) -> Any:
    """A plain connection to the store `db` names (its tables on the search path)."""
    if db.startswith("postgresql"):
        import psycopg

        return psycopg.connect(db, autocommit=True, options="-c search_path=flue")
    return sqlite3.connect(db, isolation_level=None)


def _shape(events: list[Any]) -> list[tuple[Any, ...]]:
    return [(e.type, e.submission_id, getattr(e, "text", None), getattr(e, "call_id", None)) for e in events]


def test_pages_put_together_are_the_whole_conversation_s_events(tmp_path: Path) -> None:
    # A real conversation (joins, idle, compaction-free) and direct writes after it: every page,
    # newest first, is the slice of the full rebuild its submissions make.
    store = SQLiteStore(tmp_path / "s.sqlite")
    s = flue.init(_agent(tmp_path), db=store, cwd=str(tmp_path), conversation="c")
    for i in range(3):
        assert s.prompt(f"read {i}") == "done"
    build(store, "c", 20, t0=store.submissions("c")[-1].settled_at or 0.0)
    assert s.prompt("read again") == "done"
    full = _shape(rebuild_events(store, "c"))
    pages: list[list[tuple[Any, ...]]] = []
    before: int | None = None
    older = None
    while older != 0:
        page = rebuild_page(store, "c", last=4, before_seq=before)
        assert page.submissions, "a page with submissions before it is never empty"
        pages.insert(0, _shape(page.events))
        older, before = page.older, page.first_seq
        assert older == store.count_submissions("c", before_seq=before)
    stitched = [e for p in pages for e in p]
    assert [e for e in stitched if e[0] != "idle"] == [e for e in full if e[0] != "idle"]
    assert len(pages) == (24 + 3) // 4


def test_the_newest_page_reaches_back_to_every_unsettled_submission(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        build(store, "c", 10, unsettled=6)
        page = rebuild_page(store, "c", last=3)
        queued = [e.submission_id for e in page.events if e.type == "submission_queued"]
        assert [f"c-q{j:05d}" for j in range(6)] == queued
        assert page.older == 10


def test_recovery_on_a_conversation_of_ten_thousand_submissions(tmp_path: Path) -> None:
    # A kernel died mid-run at submission 10,001: the next session recovers it, the one after
    # runs, and a chat's page and status see the conversation as it stands.
    db = tmp_path / "s.sqlite"
    now = time.time()
    bulk_build(db, "c", 10_000, t0=now - 20_000)
    with SQLiteStore(db) as store:
        assert store.count_submissions("c") == 10_000
        sid = "c-q00000"
        store.admit("c", "later 0", submission_id=sid, now=now)
        store.update_submission(sid, state=SubmissionState.RUNNING, attempts=1, started_at=now)
        store.append("c", sid, [("event", {"attempt": 1, "agent": "reader"})], now=now)
    s = flue.init(_agent(tmp_path), db=str(db), cwd=str(tmp_path), conversation="c")
    assert s.read(sid, timeout=60) == "done"
    assert s.prompt("one more") == "done"
    st = s.status()
    assert st.outcomes == {"completed": 10_002} and st.running == () and st.queued == ()
    page = rebuild_page(s.store, "c", last=5)
    assert [x.id for x in page.submissions][-2:] == [sid, s.submissions()[-1].id]
    assert page.older == 10_002 - 5
    assert any(e.type == "submission_recovery" and e.submission_id == sid for e in page.events)


@pytest.mark.parametrize("n", [0, 1])
def test_a_page_of_a_short_conversation_is_all_of_it(tmp_path: Path, n: int) -> None:
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        build(store, "c", n)
        page = rebuild_page(store, "c", last=50)
        assert page.older == 0
        assert _shape(page.events) == _shape(rebuild_events(store, "c"))


# -- the tally a status folds, kept in the store ---------------------------------------------------


class _Reading:
    """A store (as a new process opens it) that counts the records it hands a tally's fold."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def records(self, conversation_id: str, **kw: Any) -> list[Any]:
        got: list[Any] = self.inner.records(conversation_id, **kw)
        if kw.get("kinds") == tally.KINDS:
            self.read += len(got)
        return got


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store's address: an SQLite file, or a fresh PostgreSQL database (tests/pg.py)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "s.sqlite")


def _full(store: Store, cid: str) -> dict[str, Any]:
    """The tally folded from the conversation's first record, as a new process did before."""
    t = tally.Tally()
    t.fold(store.records(cid, kinds=tally.KINDS))
    return {**t.to_dict(), "seq": t.seq}


def _status(st: Any) -> tuple[Any, ...]:
    return (st.usage, st.cost_usd, st.outcomes, st.agent, st.model, st.used_tokens, st.unpriced_responses)


def test_a_new_process_folds_the_status_from_the_kept_tally_and_the_records_after_it(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nobody asks for a status while the conversation runs (a served kernel): its runner keeps
    # the tally anyway; a new process then reads the kept tally and the few records after it.
    monkeypatch.setattr(tally, "KEEP_EVERY", 20)
    monkeypatch.setattr(tally, "FOLD_EVERY", 5)
    store = open_any(db, cwd=str(tmp_path))
    s = flue.init(_agent(tmp_path, "claude-sonnet-4-6"), db=store, cwd=str(tmp_path), conversation="c")
    for i in range(12):
        assert s.prompt(f"read {i}") == "done"
    kept = store.tally("c")
    assert kept is not None
    every = store.records("c", kinds=tally.KINDS)
    after = [r for r in every if r.seq > kept[0]]
    assert after and len(after) < len(every) // 2
    fresh = _Reading(open_any(db, cwd=str(tmp_path)))
    try:
        st = StoredConversation(cast(Store, fresh), "c").status()
        assert fresh.read == len(after)  # the records after the kept tally, not the conversation's
        assert _status(st) == _status(s.status())
        assert st.outcomes == {"completed": 12} and st.usage.input_tokens == 12 * 2 * 200
        assert st.cost_usd is not None and st.cost_usd > 0
        assert fresh.tally("c")[1]["priced"] == {"claude-sonnet-4-6": repr(price_of("claude-sonnet-4-6"))}
        assert {**tally.folded(cast(Store, fresh), "c").to_dict(), "seq": every[-1].seq} == _full(store, "c")
    finally:
        fresh.inner.close()
        store.close()


def test_a_tally_that_priced_a_model_otherwise_or_of_another_version_is_not_used(db: str, tmp_path: Path) -> None:
    store = open_any(db, cwd=str(tmp_path))
    s = flue.init(_agent(tmp_path, "claude-sonnet-4-6"), db=store, cwd=str(tmp_path), conversation="c")
    for i in range(3):
        assert s.prompt(f"read {i}") == "done"
    newest = store.records("c")[-1].seq
    assert store.tally("c") is None  # fewer records than KEEP_EVERY: none kept yet
    good = tally.Tally(seq=newest).to_dict()  # an empty tally "up to the newest record"
    # Counted at a price the model no longer has (a price changed, or one added for a model
    # counted as unpriced), by another version of the fold, or not a tally at all.
    repriced = {**good, "priced": {"claude-sonnet-4-6": "Price(input=1.0, output=2.0)"}}
    unpriced = {**good, "priced": {"claude-sonnet-4-6": "None"}}
    wrongs = (repriced, unpriced, {**good, "version": 0}, {"version": 1})
    for k, wrong in enumerate(wrongs, 1):
        store.keep_tally("c", newest + k, wrong)  # a later seq replaces what is kept
        assert store.tally("c") == (newest + k, wrong)
        fresh = _Reading(open_any(db, cwd=str(tmp_path)))
        try:
            st = StoredConversation(cast(Store, fresh), "c").status()
            assert fresh.read == len(store.records("c", kinds=tally.KINDS))  # folded from the start
            assert _status(st) == _status(s.status()) and st.outcomes == {"completed": 3}
        finally:
            fresh.inner.close()
    store.keep_tally("c", 1, good)  # an earlier seq does not replace a later one
    assert store.tally("c") == (newest + len(wrongs), {"version": 1})
    store.close()


def test_a_store_that_cannot_keep_the_tally_still_answers_the_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read-only store file, say: the tally is a cache, so the status is answered without it
    # and keeping it is not tried at every fold again.
    monkeypatch.setattr(tally, "KEEP_EVERY", 5)
    db = str(tmp_path / "s.sqlite")
    s = flue.init(_agent(tmp_path), db=db, cwd=str(tmp_path), conversation="c")
    assert s.prompt("read 0") == "done"
    refused: list[int] = []

    class Refusing(_Reading):
        def keep_tally(self, conversation_id: str, seq: int, data: dict[str, Any]) -> None:
            refused.append(seq)
            raise StoreError("attempt to write a readonly database")

    fresh = Refusing(SQLiteStore(db))
    try:
        assert StoredConversation(cast(Store, fresh), "c").status().outcomes == {"completed": 1}
        assert s.prompt("read 1") == "done"
        assert StoredConversation(cast(Store, fresh), "c").status().outcomes == {"completed": 2}
        assert len(refused) == 1
    finally:
        fresh.inner.close()
