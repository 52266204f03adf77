"""Store throughput: admissions/s and records/s, one commit each, on SQLite and PostgreSQL.

Run: `.venv/bin/python bench/store.py [--seconds 1.0] [--synchronous NORMAL FULL] [--no-postgres]`.
Each case is calibrated so it runs for about `--seconds`; every operation is its own
transaction, as the runtime issues them, so the numbers include the commit cost. PostgreSQL runs
on a throwaway local server (tests/pg.py) with its default durability (`fsync=on`,
`synchronous_commit=on`), over TCP on loopback. `two_processes()` runs two processes that share
one conversation through the store and counts lost and duplicated messages.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flue_nb.runtime.store.sqlite import SQLiteStore

# About the size of an assistant message with a short answer and one tool call.
MESSAGE = {
    "role": "assistant",
    "content": [
        {"type": "text", "text": "Let me look at the data frame first. " * 20},
        {
            "type": "tool_call",
            "id": "call_0123456789",
            "name": "python",
            "input": {"code": "df.describe()\nprint(df.head(20))"},
        },
    ],
    "usage": {"input_tokens": 1834, "output_tokens": 212},
}


def _timed(op: Callable[[int], None], seconds: float) -> tuple[int, float]:
    """Run `op(i)` for a calibration burst, then for about `seconds`; return (n, elapsed)."""
    start = time.perf_counter()
    probe = 0
    while time.perf_counter() - start < 0.1:
        op(probe)
        probe += 1
    rate = probe / (time.perf_counter() - start)
    n = max(100, int(rate * seconds))
    start = time.perf_counter()
    for i in range(probe, probe + n):
        op(i)
    return n, time.perf_counter() - start


ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def postgres_url() -> Iterator[str]:
    """A fresh database on a throwaway local PostgreSQL server (durability settings as shipped)."""
    sys.path.insert(0, str(ROOT))
    from tests.pg import PgServer, unavailable

    why = unavailable()
    if why is not None:
        raise RuntimeError(f"no PostgreSQL server: {why}")
    server = PgServer(fast=False).start()
    try:
        yield server.create_database("bench")
    finally:
        server.destroy()


def bench(synchronous: str, seconds: float) -> list[tuple[str, str, str, int, float, float]]:
    """Measure the three cases on a fresh temp store; return table rows."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.sqlite", synchronous=synchronous)  # type: ignore[arg-type]
        try:
            return _cases(store, store.journal_mode, store.synchronous, seconds)
        finally:
            store.close()


def bench_postgres(url: str, seconds: float) -> list[tuple[str, str, str, int, float, float]]:
    """The same three cases on a `PostgresStore`."""
    from flue_nb.runtime.store.postgres import PostgresStore

    with PostgresStore(url) as store:
        return _cases(store, "postgres", "commit=on", seconds)


def _cases(store: Any, mode: str, sync: str, seconds: float) -> list[tuple[str, str, str, int, float, float]]:
    rows = []
    store.admit("c", "hi", submission_id="base", now=0.0)

    def admit(i: int) -> None:
        store.admit(f"conv-{i % 8}", "what is in df?", submission_id=f"s{i}", now=1.0)

    def append_one(i: int) -> None:
        store.append("c", "base", [("message", MESSAGE)], now=2.0)

    batch = [("message", MESSAGE)] * 10

    def append_ten(i: int) -> None:
        store.append("c", "base", batch, now=3.0)  # type: ignore[arg-type]

    for name, op, per_op in (
        ("admit (1 submission/tx)", admit, 1),
        ("append (1 record/tx)", append_one, 1),
        ("append (10 records/tx)", append_ten, 10),
    ):
        n, elapsed = _timed(op, seconds)
        rows.append((name, mode, sync, n, elapsed, n * per_op / elapsed))
    return rows


_WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import flue_nb as flue
    from flue_nb.models import FunctionModel, reply
    db, name, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])

    @flue.agent(name="bench")
    def bench_agent():
        flue.use_model(FunctionModel(lambda request: reply("ok")), compaction=False)
        return "You answer."

    session = flue.init(bench_agent, conversation="team:shared", db=db, cwd=str(go.parent))
    (go.parent / f"ready-{name}").touch()
    while not go.exists():
        time.sleep(0.005)
    receipts = [session.dispatch(f"{name} {i}") for i in range(n)]
    for r in receipts:
        session.read(r, timeout=300)
    print(json.dumps([r.submission_id for r in receipts]))
    """
)


def two_processes(db: str, n: int = 100) -> dict[str, Any]:
    """Two processes dispatch `n` messages each to one shared conversation; all must settle once."""
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _WORKER, db, name, str(n), str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for name in ("a", "b")
        ]
        try:
            deadline = time.monotonic() + 120
            while not all((Path(tmp) / f"ready-{name}").exists() for name in ("a", "b")):
                if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                    raise RuntimeError(f"a worker failed: {[p.communicate() for p in procs]}")
                time.sleep(0.01)
            start = time.perf_counter()
            go.touch()
            outs = [p.communicate(timeout=600) for p in procs]
            elapsed = time.perf_counter() - start
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        for p, (_, err) in zip(procs, outs):
            if p.returncode != 0:
                raise RuntimeError(err[-2000:])
        sent = [sid for out, _ in outs for sid in json.loads(out)]
        from flue_nb.runtime.store.url import open_any

        store = open_any(db, cwd=tmp)
        try:
            subs = store.submissions("team:shared")
            settlements = [r.submission_id for r in store.records("team:shared", kinds=["settlement"])]
            users = [
                r.data.get("submission_id")
                for r in store.records("team:shared", kinds=["message"])
                if r.data.get("kind") == "user"
            ]
        finally:
            store.close()
    stored = {s.id for s in subs}
    settled_once = {sid for sid in sent if settlements.count(sid) == 1 and users.count(sid) == 1}
    return {
        "messages": len(sent),
        "seconds": elapsed,
        "messages_per_s": len(sent) / elapsed,
        "lost": len(set(sent) - stored) + len(set(sent) - set(settlements)),
        "duplicated": (len(settlements) - len(set(settlements))) + (len(users) - len(set(users))),
        "exactly_once": len(settled_once),
    }


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--synchronous", nargs="+", default=["NORMAL", "FULL"])
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--messages", type=int, default=100, help="per process, two-process run")
    args = parser.parse_args()
    size = len(json.dumps(MESSAGE))
    print(f"SQLiteStore throughput (temp file, record ~{size} bytes of JSON)")
    print(f"{'case':<26} {'journal':<8} {'sync':<7} {'N':>7} {'sec':>6} {'items/s':>10}")
    for sync in args.synchronous:
        for name, mode, s, n, elapsed, rate in bench(sync, args.seconds):
            print(f"{name:<26} {mode:<8} {s:<7} {n:>7} {elapsed:>6.2f} {rate:>10,.0f}")
    runs: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        runs.append(("sqlite (WAL, NORMAL)", two_processes(str(Path(tmp) / "two.sqlite"), args.messages)))
    if not args.no_postgres:
        with postgres_url() as url:
            for name, mode, s, n, elapsed, rate in bench_postgres(url, args.seconds):
                print(f"{name:<26} {mode:<8} {s:<7} {n:>7} {elapsed:>6.2f} {rate:>10,.0f}")
            runs.append(("postgres", two_processes(url, args.messages)))
    print("\ntwo processes, one shared conversation (offline model, instant answers)")
    print(f"{'store':<22} {'messages':>8} {'sec':>6} {'msg/s':>7} {'lost':>5} {'dup':>4}")
    for label, r in runs:
        print(
            f"{label:<22} {r['messages']:>8} {r['seconds']:>6.2f} {r['messages_per_s']:>7.1f} "
            f"{r['lost']:>5} {r['duplicated']:>4}"
        )


if __name__ == "__main__":
    main()
