"""Benchmark: flat cost as a conversation grows, ms/turn early vs at turn 1,000.

One conversation of 1,000 turns on a SQLite file store: turns 1..999 ask for one small `read`,
turn 1,000 answers; the model reports usage every turn, growing as a real provider's would.
Each turn is timed from its `turn_start` event to the next (the last one to settlement), taken
by an observer on the runtime thread. Figures: median ms/turn of turns 1-20 and of turns
990-1,000, and their ratio (target <= 1.5: token accounting and the store are incremental).

`--no-usage` runs the same conversation with a model that reports no usage (the runtime then
estimates every message itself), as an extra row.

    .venv/bin/python bench/flat_cost.py [--turns 1000] [--no-usage]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, median, print_table, verdict  # noqa: E402

TURNS = 1000
EARLY = (1, 20)
LATE = (990, 1000)


def measure(turns: int = TURNS, *, usage: bool = True) -> dict[str, Any]:
    """Run one `turns`-turn conversation; per-turn durations in ms, indexed from turn 1."""
    import flue_nb as flue
    from flue_nb.models import FunctionModel, reply, tool_call

    workdir = tempfile.mkdtemp(prefix="flue-bench-flat-")
    with open(os.path.join(workdir, "small.txt"), "w") as f:
        f.write("".join(f"line {i}: the quick brown fox\n" for i in range(7)))
    calls = 0

    def fn(request: Any) -> Any:
        nonlocal calls
        calls += 1
        # What a provider reports: the whole prompt as input (it grows ~100 tokens a turn).
        u = (2_000 + 100 * calls, 30) if usage else None
        if calls < turns:
            return reply("", tool_call("read", path="small.txt"), usage=u)
        return reply("done", usage=u)

    model = FunctionModel(fn)

    @flue.agent
    def flat_agent() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.local(workdir))
        return "You are helpful."

    s = flue.init(flat_agent, db=os.path.join(workdir, "flat.sqlite"), cwd=workdir,
                  conversation=f"flat-{usage}")
    starts: list[float] = []
    compactions = 0
    end = 0.0

    def observe(ev: Any) -> None:
        nonlocal compactions, end
        if ev.type == "turn_start":
            starts.append(time.perf_counter())
        elif ev.type == "compaction_start":
            compactions += 1
        elif ev.type == "submission_settled":
            end = time.perf_counter()

    stop = s.observe(observe)
    t0 = time.perf_counter()
    answer = s.prompt("Read small.txt again and again.")
    total = time.perf_counter() - t0
    stop()
    assert answer == "done" and calls == turns and len(starts) == turns, (answer, calls, len(starts))
    marks = [*starts, end]
    per_turn = [(marks[i + 1] - marks[i]) * 1000 for i in range(turns)]  # per_turn[k-1] = turn k
    early = per_turn[EARLY[0] - 1 : EARLY[1]]
    late = per_turn[LATE[0] - 1 : LATE[1]] if turns >= LATE[1] else per_turn[-11:]
    return {
        "turns": turns,
        "usage": usage,
        "early_ms": median(early),
        "late_ms": median(late),
        "ratio": median(late) / median(early),
        "turn10_ms": per_turn[9],
        "total_s": total,
        "compactions": compactions,
    }


def rows_for(m: dict[str, Any], *, target: bool) -> list[Result]:
    label = "flat cost (1,000-turn conversation" + (", usage reported)" if m["usage"] else
                                                   ", no usage reported)")
    rows = [
        Result(label, "ms/turn, turns 1-20 / 990-1000 (median)",
               f"{m['early_ms']:.2f} / {m['late_ms']:.2f}", "", "info"),
    ]
    note = f" ({m['compactions']} compactions!)" if m["compactions"] else ""
    rows.append(Result(label, "ratio turn ~1000 / turn ~10", f"{m['ratio']:.2f}x{note}",
                       "<= 1.5x" if target else "",
                       verdict(m["ratio"] <= 1.5 and not m["compactions"]) if target else "info"))
    return rows


def run(quick: bool = False) -> list[Result]:
    rows = rows_for(measure(), target=True)
    if not quick:
        rows += rows_for(measure(usage=False), target=False)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=TURNS)
    ap.add_argument("--no-usage", action="store_true", help="also run without reported usage")
    opts = ap.parse_args()
    rows = rows_for(measure(opts.turns), target=True)
    if opts.no_usage:
        rows += rows_for(measure(opts.turns, usage=False), target=False)
    print(load_line())
    print_table(rows)


if __name__ == "__main__":
    main()
