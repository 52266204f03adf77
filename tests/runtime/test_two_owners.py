"""Two processes on one store file and one conversation: one owner at a time (contract 10, 11.1).

Process A runs a slow submission. While it streams, process B opens the same store and
conversation and dispatches two messages: they are admitted durably at once, but B does not run
anything while A holds the conversation's lease; B's `compact()` gets `SessionBusyError`; B's
`read` waits until its messages settle (A's worker runs them, it holds the lease). Once A is
idle, a third message from B runs in B. Afterwards the file passes `PRAGMA integrity_check`,
every submission settled exactly once, no two processes ran submissions at the same time, and the
records' seqs are unique and increasing.

Both run on SQLite and on PostgreSQL; B also runs with its clock seam skewed by ten minutes,
which must change nothing (leases are measured by the store's clock, not a kernel's).

This module is also the owner program: `python test_two_owners.py a|b --db PATH --dir DIR`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import flue_nb as flue
from flue_nb.runtime.store import Outcome, SubmissionState
from flue_nb.runtime.store.sqlite import SQLiteStore

CONVERSATION = "shared"
LEASE_TTL = 2.0
SLOW_TEXT = " ".join(f"slow{i}" for i in range(80))
"""A's first answer, streamed at 0.05 s a word; it holds after its first word until B has made
its checks (`b_checked`): B's start-up on a loaded machine can take longer than the whole answer."""
CHECK_IN_WAIT = 60.0
A_MESSAGE = "A: a slow question"
B_MESSAGES = ("B: first question", "B: second question")
B_LATE = "B: a question after A went idle"


# --- the owner program (runs in a child process) ---------------------------------------------


def _owner_main() -> None:
    from flue_nb.models import FunctionModel, ModelRequest, reply

    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["a", "b"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--skew", type=float, default=0.0, help="seconds added to this clock")
    args = parser.parse_args()
    role, d = args.role, Path(args.dir)

    def log(*fields: Any) -> None:
        with open(d / "events.log", "a") as f:
            f.write(" ".join(str(x) for x in (role, *fields, time.time())) + "\n")

    def answer(request: ModelRequest) -> Any:
        last = _last_user_text(request)
        return reply(SLOW_TEXT if last == A_MESSAGE else f"{role} answers {last!r}")

    class LoggedModel:
        """Logs when each model stream starts and ends in this process."""

        def __init__(self) -> None:
            self.inner = FunctionModel(answer, delay=0.05)

        @property
        def info(self) -> Any:
            return self.inner.info

        async def stream(self, request: ModelRequest) -> Any:
            log("stream_start", "-")
            hold = role == "a" and _last_user_text(request) == A_MESSAGE
            async for event in self.inner.stream(request):
                yield event
                if hold:  # the first word is out (`a_streaming`): keep running until B checked in
                    hold = False
                    await _check_in(d)
            log("stream_end", "-")

    model = LoggedModel()

    @flue.agent(name="shared_agent")
    def shared_agent() -> str:
        flue.use_model(model, compaction=False)
        return "You answer questions."

    from flue_nb.runtime.core.loop import RunSettings

    skewed = RunSettings(clock=lambda: time.time() + args.skew) if args.skew else None
    session = flue.init(
        shared_agent,
        conversation=CONVERSATION,
        db=args.db,
        cwd=str(d),
        lease_ttl=LEASE_TTL,
        settings=skewed,
    )
    store = session.store

    def observe(event: Any) -> None:
        if event.type in ("submission_running", "submission_settled"):
            log(event.type, event.submission_id)
        if role == "a" and event.type == "text_delta" and not (d / "a_streaming").exists():
            (d / "a_streaming").write_text(event.submission_id or "")

    session.observe(observe)
    report: dict[str, Any] = {"owner": store.lease(CONVERSATION)}

    if role == "a":
        _run_a(session, d, report)
    else:
        _run_b(session, d, report)
    (d / f"{role}.json").write_text(json.dumps(report))


def _last_user_text(request: Any) -> str:
    from flue_nb.runtime.messages import UserMessage

    return str(next(m for m in reversed(request.messages) if isinstance(m, UserMessage)).text)


async def _check_in(d: Path) -> None:
    """Wait (on the runtime's loop, so A's lease keeps beating) until B has made its checks."""
    import asyncio

    deadline = time.monotonic() + CHECK_IN_WAIT
    while not (d / "b_checked").exists():
        if time.monotonic() > deadline:
            print(f"owner a: owner b did not check in within {CHECK_IN_WAIT:g} s; answering anyway", flush=True)
            return
        await asyncio.sleep(0.02)


def _run_a(session: Any, d: Path, report: dict[str, Any]) -> None:
    """Owner A: a slow answer, then idle while B takes the conversation over."""
    store = session.store
    receipt = session.dispatch(A_MESSAGE)
    report["result"] = session.read(receipt, timeout=60.0)
    # A's worker also runs what B queued meanwhile (it holds the lease): wait until all
    # settled and A gave the lease up, then stay alive (idle) while B takes over.
    deadline = time.monotonic() + 60.0
    while store.submissions(CONVERSATION, unsettled=True) or store.lease(CONVERSATION) is not None:
        if time.monotonic() > deadline:
            raise SystemExit("owner a: the conversation never went idle")
        time.sleep(0.02)
    (d / "a_idle").touch()
    while not (d / "b_done").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    report["lease_after_b"] = store.lease(CONVERSATION)


def _run_b(session: Any, d: Path, report: dict[str, Any]) -> None:
    """Owner B: messages admitted while A runs, a compaction, and a message after A went idle."""
    store = session.store
    (a_sub,) = store.submissions(CONVERSATION)
    receipts = [session.dispatch(text) for text in B_MESSAGES]
    report["admitted"] = [
        (store.submission(r.submission_id).state.value, r.submission_id)
        for r in receipts  # type: ignore[union-attr]
    ]
    a_now = store.submission(a_sub.id)
    report["a_state_at_admission"] = a_now.state.value if a_now else None
    report["lease_at_admission"] = store.lease(CONVERSATION)
    report["b_owner"] = session._conv.owner
    try:
        session.compact()
        report["compact"] = "no error"
    except flue.FlueError as exc:
        report["compact"] = [type(exc).__name__, exc.type, exc.message]
    (d / "b_checked").touch()  # A's answer may go on now
    report["results"] = [session.read(r, timeout=60.0) for r in receipts]
    # A is alive but idle and has released the lease: now B owns the conversation.
    deadline = time.monotonic() + 60.0
    while not (d / "a_idle").exists():
        if time.monotonic() > deadline:
            raise SystemExit("owner b: owner a never went idle")
        time.sleep(0.02)
    late = session.dispatch(B_LATE)
    report["late"] = [late.submission_id, session.read(late, timeout=60.0)]
    (d / "b_done").touch()


STALE_MESSAGE = "a question whose owner stalls"
TAKER_TEXT = "the taker finished it " + " ".join(f"taker{i}" for i in range(40))
STALL_LEASE_TTL = 1.0
# The taker's own lease is long: with 1 s, a loaded machine (load 20 on 2 cores) delayed its
# renewal past expiry, and the resumed stalled owner then took the conversation back lawfully
# and finished the submission itself, which is not the case this test is about.
TAKER_LEASE_TTL = 30.0


def _stall_main() -> None:
    """Roles `stalled` (runs a slow answer and a tool; the parent SIGSTOPs it mid-stream) and
    `taker` (opens the store after the lease expired and recovers the submission)."""
    import threading

    from flue_nb.models import FunctionModel, ModelRequest, reply, tool_call

    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["stalled", "taker"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--slow", action="store_true", help="the taker streams slowly")
    args = parser.parse_args()
    role, d = args.role, Path(args.dir)

    @flue.tool
    def work(ctx: flue.ToolContext) -> str:
        """A side effect outside the store."""
        with open(d / "tool_runs", "a") as f:
            f.write(f"{role} {ctx.call_id}\n")
        return "done"

    def answer(request: ModelRequest) -> Any:
        if role == "taker":
            return reply(TAKER_TEXT)
        if not any(getattr(m, "kind", None) == "tool_result" for m in request.messages):
            return reply(SLOW_TEXT, tool_call("work", "call_stalled"))
        return reply("the stalled owner finished it")

    model = FunctionModel(answer, delay=0.05 if role == "stalled" or args.slow else 0.0)

    @flue.agent(name="stall_agent")
    def stall_agent() -> str:
        flue.use_model(model, compaction=False)
        flue.use_tool(work)
        return "You answer questions."

    ttl = STALL_LEASE_TTL if role == "stalled" else TAKER_LEASE_TTL
    session = flue.init(stall_agent, conversation=CONVERSATION, db=args.db, cwd=str(d), lease_ttl=ttl)
    idle = threading.Event()

    def observe(event: Any) -> None:
        if event.type == "text_delta" and not (d / f"{role}_streaming").exists():
            (d / f"{role}_streaming").touch()
        if event.type == "idle":
            idle.set()

    session.observe(observe)
    report: dict[str, Any] = {}
    if role == "stalled":
        receipt = session.dispatch(STALE_MESSAGE)
        # Resumed after the taker settled the submission: let the worker do whatever it does.
        idle.wait(60.0)
        report["result"] = session.read(receipt, timeout=10.0)
    else:
        (sub,) = session.submissions()
        report["result"] = session.read(sub.id, timeout=60.0)
    (d / f"{role}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    if sys.argv[1] in ("stalled", "taker"):
        _stall_main()
    else:
        _owner_main()
    sys.exit(0)


# --- the test ---------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The shared store: a file in the test's directory, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "store.sqlite")


def _open(db: str) -> Any:
    if db.startswith("postgresql://"):
        from flue_nb.runtime.store.postgres import PostgresStore

        return PostgresStore(db)
    return SQLiteStore(db)


def _check_integrity(db: str) -> None:
    if not db.startswith("postgresql://"):
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def _start(role: str, d: Path, *flags: str, db: str) -> subprocess.Popen[bytes]:
    out = open(d / f"{role}.out", "w")  # noqa: SIM115 - closed when the process is reaped
    cmd = [sys.executable, __file__, role, "--db", db, "--dir", str(d), *flags]
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=d)
    out.close()
    return proc


def _finish(proc: subprocess.Popen[bytes], role: str, d: Path) -> dict[str, Any]:
    try:
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        # pytest.fail, not assert: the xfail below expects only its own AssertionError.
        pytest.fail(f"owner {role} failed:\n{(d / f'{role}.out').read_text()[-3000:]}")
    return json.loads((d / f"{role}.json").read_text())


def _windows(d: Path) -> dict[str, list[tuple[float, float]]]:
    """Per process: the time windows in which it ran a submission or streamed the model."""
    opened: dict[tuple[str, str], float] = {}
    windows: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    for line in (d / "events.log").read_text().splitlines():
        role, kind, sid, t = line.split()
        if kind in ("submission_running", "stream_start"):
            opened.setdefault((role, sid if kind == "submission_running" else "stream"), float(t))
        else:
            start = opened.pop((role, sid if kind == "submission_settled" else "stream"))
            windows[role].append((start, float(t)))
    assert not opened, f"runs that never ended: {opened}"
    return windows


@pytest.mark.parametrize("skew", [0, 600], ids=["same_clock", "b_clock_10_min_ahead"])
def test_second_process_is_admitted_durably_but_waits_for_the_lease(tmp_path: Path, db: str, skew: int) -> None:
    a = _start("a", tmp_path, db=db)
    deadline = time.monotonic() + 30.0
    while not (tmp_path / "a_streaming").exists():
        assert a.poll() is None, f"owner a exited early:\n{(tmp_path / 'a.out').read_text()}"
        assert time.monotonic() < deadline, "owner a never started streaming"
        time.sleep(0.01)
    b_report = _finish(_start("b", tmp_path, "--skew", str(skew), db=db), "b", tmp_path)
    a_report = _finish(a, "a", tmp_path)

    # B was admitted while A ran, and did not take the conversation over.
    assert b_report["a_state_at_admission"] == "running"
    assert [state for state, _ in b_report["admitted"]] == ["queued", "queued"]
    lease_owner, _ = b_report["lease_at_admission"]
    assert lease_owner != b_report["b_owner"] and f":{a.pid}:" in lease_owner
    assert b_report["compact"][:2] == ["SessionBusyError", "session_busy"]
    assert a_report["result"] == SLOW_TEXT
    runners = _runners(tmp_path, [sid for _, sid in b_report["admitted"]] + [b_report["late"][0]])
    assert b_report["results"] == [f"{who} answers {text!r}" for who, text in zip(runners, B_MESSAGES)]
    # Once A is idle (lease released, process alive), B takes the conversation over.
    assert runners[2] == "b" and b_report["late"][1] == f"b answers {B_LATE!r}"
    assert a_report["lease_after_b"] is None

    # One owner at a time: no window of one process overlaps a window of the other.
    windows = _windows(tmp_path)
    assert windows["a"] and windows["b"], f"both owners should have run something: {windows}"
    for a_start, a_end in windows["a"]:
        for b_start, b_end in windows["b"]:
            assert a_end <= b_start or b_end <= a_start, f"a ran {a_start}-{a_end} while b ran {b_start}-{b_end}"

    # The file is sound and every submission settled exactly once.
    _check_integrity(db)
    with _open(db) as store:
        subs = store.submissions(CONVERSATION)
        records = store.records(CONVERSATION)
    assert [s.text for s in subs] == [A_MESSAGE, *B_MESSAGES, B_LATE]
    assert all(s.state == SubmissionState.SETTLED and s.outcome == Outcome.COMPLETED for s in subs)
    settlements = Counter(r.submission_id for r in records if r.kind == "settlement")
    assert settlements == Counter({s.id: 1 for s in subs})
    settled_events = Counter(
        line.split()[2] for line in (tmp_path / "events.log").read_text().splitlines() if " submission_settled " in line
    )
    assert settled_events == Counter({s.id: 1 for s in subs})
    users = Counter(r.data["submission_id"] for r in records if r.kind == "message" and r.data["kind"] == "user")
    assert users == Counter({s.id: 1 for s in subs})
    seqs = [r.seq for r in records]
    assert seqs == sorted(set(seqs))
    assert [s.seq for s in subs] == sorted({s.seq for s in subs})


def _runners(d: Path, sids: list[str]) -> list[str]:
    """Which process ran each submission (its `submission_running` event says)."""
    ran = {
        line.split()[2]: line.split()[0]
        for line in (d / "events.log").read_text().splitlines()
        if " submission_running " in line
    }
    return [ran[sid] for sid in sids]


def _wait_for(path: Path, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30.0
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"{what}: the process exited early ({proc.returncode})")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within 30 s")
        time.sleep(0.01)


def _wait_for_partial(db: str, proc: subprocess.Popen[bytes]) -> None:
    """Until the stalled owner's stream has a durable partial snapshot (every 0.25 s of its
    clock, which a loaded machine stretches): stopped before it, it would leave nothing to keep."""
    deadline = time.monotonic() + 30.0
    with _open(db) as store:
        while not ((subs := store.submissions(CONVERSATION)) and store.partial(subs[0].id)):
            if proc.poll() is not None:
                pytest.fail(f"the stalled owner exited before its first partial snapshot ({proc.returncode})")
            if time.monotonic() > deadline:
                pytest.fail("the stalled owner wrote no partial snapshot within 30 s")
            time.sleep(0.01)


@pytest.mark.parametrize("resume", ["after_the_taker_settled", "while_the_taker_streams"])
def test_owner_stalled_past_its_lease_writes_nothing_once_another_owner_took_over(
    tmp_path: Path, resume: str, db: str
) -> None:
    # SIGSTOP stands for a kernel that stops running without dying (a suspended laptop, a
    # debugger, a C call holding the GIL): its lease expires and the next owner recovers.
    stalled = _start("stalled", tmp_path, db=db)
    try:
        _wait_for(tmp_path / "stalled_streaming", stalled, "the stalled owner streaming")
        _wait_for_partial(db, stalled)
        os.kill(stalled.pid, signal.SIGSTOP)
        time.sleep(STALL_LEASE_TTL + 0.5)
        with _open(db) as store:
            (sub,) = store.submissions(CONVERSATION)
            stopped_at = (sub.state, store.partial(sub.id), store.lease(CONVERSATION))
        if stopped_at[0] != SubmissionState.RUNNING or not stopped_at[1] or stopped_at[2][1] > time.time():
            pytest.fail(f"the owner was not stopped mid-stream with an expired lease: {stopped_at}")
        if resume == "after_the_taker_settled":
            taker = _finish(_start("taker", tmp_path, db=db), "taker", tmp_path)
        else:
            proc = _start("taker", tmp_path, "--slow", db=db)
            _wait_for(tmp_path / "taker_streaming", proc, "the taker streaming")
            os.kill(stalled.pid, signal.SIGCONT)  # both run now; only the taker owns the lease
            taker = _finish(proc, "taker", tmp_path)
    finally:
        if stalled.poll() is None:
            os.kill(stalled.pid, signal.SIGCONT)
    stale = _finish(stalled, "stalled", tmp_path)

    with _open(db) as store:
        (sub,) = store.submissions(CONVERSATION)
        records = store.records(CONVERSATION)
    _check_integrity(db)
    settlements = [r for r in records if r.kind == "settlement"]
    outcomes = (taker["result"], stale["result"], sub.state, sub.result, len(settlements))
    if outcomes != (TAKER_TEXT, TAKER_TEXT, SubmissionState.SETTLED, TAKER_TEXT, 1):
        pytest.fail(f"the taker did not settle the submission exactly once: {outcomes}")
    (settlement,) = settlements
    # Before it was stopped the stalled owner had recorded only the user message (and the
    # prompt); everything it would write after losing the lease is recognisable.
    stale_writes = [
        (r.seq, r.kind, r.data.get("kind"), r.data.get("call_id"))
        for r in records
        if r.seq > settlement.seq
        or r.data.get("call_id") == "call_stalled"
        or (
            r.data.get("kind") == "assistant"
            and not r.data["aborted"]
            and any(p.get("id") == "call_stalled" or "stalled owner" in p.get("text", "") for p in r.data["parts"])
        )
    ]
    runs = (tmp_path / "tool_runs").read_text().splitlines() if (tmp_path / "tool_runs").exists() else []
    assert (stale_writes, runs) == ([], []), (
        "the owner that lost its lease kept running after it resumed: records it wrote "
        f"{stale_writes}, tool runs {runs}"
    )
    seqs = [r.seq for r in records]
    assert seqs == sorted(set(seqs))
