"""Benchmark: what `Session.status()` costs as a conversation grows.

The chat widget's gauge calls `status()` at every status change, and `%flue status` on demand.
One conversation on a SQLite file store (an offline model reporting usage) grows to each size;
at each, `status()` is timed (median of REPS calls after a first one, which folds what was
appended since the last look) next to `lease()`, the one-row read a cell does before it runs.
The target: at most 2 ms at 3,000 turns (it read and parsed the whole history before: 102 ms).
What still grows with the conversation is one indexed scan of its submissions for the unsettled
ones (about 0.1 us per submission); the ratio row shows it.

    .venv/bin/python bench/status_cost.py
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, median, print_table, temp_dir, verdict

SIZES = (10, 1000, 3000)
REPS = 20
TARGET_MS = 2.0


def _timed(fn: object, reps: int = REPS) -> float:
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - t0) * 1000)
    return median(samples)


def measure(sizes: tuple[int, ...] = SIZES) -> dict[int, tuple[float, float]]:
    """turns -> (status ms, lease ms)."""
    import flue_nb as flue
    from flue_nb.models import ScriptedModel, reply

    n_max = max(sizes)
    model = ScriptedModel([reply("ok " * 50, usage=(120, 60)) for _ in range(n_max)], id="claude-sonnet-4-6")

    @flue.agent
    def bench_status():
        flue.use_model(model)
        return "You are benchmarked."

    s = flue.init(bench_status, db=os.path.join(temp_dir("flue-bench-status-"), "s.sqlite"))
    out = {}
    for n in sizes:
        while len(s.submissions()) < n:
            s.prompt("hi " * 20)
        s.status()  # fold what was appended since the last look
        out[n] = (_timed(s.status), _timed(s.lease))
    return out


def rows_for(m: dict[int, tuple[float, float]]) -> list[Result]:
    small, large = min(m), max(m)
    rows = [
        Result("status()", f"{n:,} turns: status() / lease()", f"{st:.2f} ms / {le:.3f} ms", "", "info")
        for n, (st, le) in m.items()
    ]
    ratio = m[large][0] / max(m[small][0], 1e-6)
    rows.append(Result("status()", f"status() at {large:,} turns / at {small:,}", f"{ratio:.1f}x", "", "info"))
    rows.append(
        Result(
            "status()",
            f"status() at {large:,} turns",
            f"{m[large][0]:.2f} ms",
            f"<= {TARGET_MS:g} ms",
            verdict(m[large][0] <= TARGET_MS),
        )
    )
    return rows


def run(quick: bool = False) -> list[Result]:
    return rows_for(measure((10, 1000) if quick else SIZES))


def main() -> None:
    print(load_line())
    print_table(rows_for(measure()))


if __name__ == "__main__":
    main()
