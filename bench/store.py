"""Throughput of `SQLiteStore` on a temp file: admissions/s and records/s, one commit each.

Run: `.venv/bin/python bench/store.py [--seconds 1.0] [--synchronous NORMAL FULL]`.
Each case is calibrated so it runs for about `--seconds`; every operation is its own
transaction, as the runtime issues them, so the numbers include the commit cost.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

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


def bench(synchronous: str, seconds: float) -> list[tuple[str, str, str, int, float, float]]:
    """Measure the three cases on a fresh temp store; return table rows."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.sqlite", synchronous=synchronous)  # type: ignore[arg-type]
        try:
            mode, sync = store.journal_mode, store.synchronous
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
        finally:
            store.close()
    return rows


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--synchronous", nargs="+", default=["NORMAL", "FULL"])
    args = parser.parse_args()
    size = len(json.dumps(MESSAGE))
    print(f"SQLiteStore throughput (temp file, record ~{size} bytes of JSON)")
    print(f"{'case':<26} {'journal':<8} {'sync':<7} {'N':>7} {'sec':>6} {'items/s':>10}")
    for sync in args.synchronous:
        for name, mode, s, n, elapsed, rate in bench(sync, args.seconds):
            print(f"{name:<26} {mode:<8} {s:<7} {n:>7} {elapsed:>6.2f} {rate:>10,.0f}")


if __name__ == "__main__":
    main()
