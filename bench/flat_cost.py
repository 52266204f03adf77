"""Benchmark: flat cost as a conversation grows, ms/turn early vs at turn 1,000.

One conversation of 1,000 turns on a SQLite file store: turns 1..999 ask for one small `read`,
turn 1,000 answers; the model reports usage every turn, growing as a real provider's would.
Each turn is timed from its `turn_start` event to the next (the last one to settlement), taken
by an observer on the runtime thread. Figures: median ms/turn of turns 1-20 and of turns
990-1,000, and their ratio (target <= 1.5: token accounting and the store are incremental).
The same windows in process CPU time are an extra row: on a loaded machine a whole 11-turn
window can fall in one stretch the process waits for a core, which moves the wall median but not
the CPU one, so that row says whether the work per turn grew.

`--no-usage` runs the same conversation with a model that reports no usage (the runtime then
estimates every message itself), as an extra row.

    .venv/bin/python bench/flat_cost.py [--turns 1000] [--no-usage]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import PROMPT, ReadLoop, Result, load_line, median, print_table, temp_dir, verdict

TURNS = 1000
EARLY = (1, 20)
LATE = (990, 1000)


def measure(turns: int = TURNS, *, usage: bool = True, profile: bool = False) -> dict[str, Any]:
    """Run one `turns`-turn conversation; per-turn durations in ms, indexed from turn 1."""
    workdir = temp_dir("flue-bench-flat-")
    loop = ReadLoop(workdir, turns, usage=usage)
    s = loop.session(os.path.join(workdir, "flat.sqlite"), f"flat-{usage}")
    starts: list[float] = []
    cpu: list[float] = []  # process CPU time at each turn_start, then at settlement
    compactions = 0
    end = 0.0
    # Profiles of the early and late windows, switched on and off from the observer, which runs
    # on the runtime thread (where cProfile must be enabled to see the loop).
    windows = {EARLY: cProfile.Profile(), LATE: cProfile.Profile()} if profile else {}

    def observe(ev: Any) -> None:
        nonlocal compactions, end
        if ev.type == "turn_start":
            starts.append(time.perf_counter())
            cpu.append(time.process_time())
            n = len(starts)
            for (lo, hi), prof in windows.items():
                if n == lo:
                    prof.enable()
                elif n == hi + 1:
                    prof.disable()
        elif ev.type == "compaction_start":
            compactions += 1
        elif ev.type == "submission_settled":
            end = time.perf_counter()
            cpu.append(time.process_time())
            if n_started() == LATE[1] and LATE in windows:
                windows[LATE].disable()

    def n_started() -> int:
        return len(starts)

    stop = s.observe(observe)
    t0 = time.perf_counter()
    answer = s.prompt(PROMPT)
    total = time.perf_counter() - t0
    stop()
    assert answer == "done" and loop.calls == turns and len(starts) == turns, (
        answer,
        loop.calls,
        len(starts),
    )
    marks = [*starts, end]
    per_turn = [(marks[i + 1] - marks[i]) * 1000 for i in range(turns)]  # per_turn[k-1] = turn k
    cpu_turn = [(cpu[i + 1] - cpu[i]) * 1000 for i in range(turns)]
    early, cpu_early = per_turn[EARLY[0] - 1 : EARLY[1]], cpu_turn[EARLY[0] - 1 : EARLY[1]]
    late, cpu_late = _late(per_turn), _late(cpu_turn)
    return {
        "turns": turns,
        "usage": usage,
        "early_ms": median(early),
        "late_ms": median(late),
        "ratio": median(late) / median(early),
        "cpu_early_ms": median(cpu_early),
        "cpu_late_ms": median(cpu_late),
        "turn10_ms": per_turn[9],
        "total_s": total,
        "compactions": compactions,
        "profile": _profile_text(windows) if profile else "",
    }


def _late(per_turn: list[float]) -> list[float]:
    """Turns 990-1,000 of `per_turn` (turn k at index k-1); the last 11 of a shorter run."""
    return per_turn[LATE[0] - 1 : LATE[1]] if len(per_turn) >= LATE[1] else per_turn[-11:]


def _profile_text(windows: dict[tuple[int, int], cProfile.Profile], top: int = 15) -> str:
    """Own time per turn of the top functions, early window next to late window."""
    per: dict[tuple[int, int], dict[Any, tuple[float, float]]] = {}
    for (lo, hi), prof in windows.items():
        st = pstats.Stats(prof)
        n = hi - lo + 1
        per[(lo, hi)] = {f: (v[2] * 1000 / n, v[1] / n) for f, v in st.stats.items()}  # type: ignore[attr-defined]
    early, late = per[EARLY], per[LATE]
    growth = sorted(
        set(early) | set(late),
        key=lambda f: late.get(f, (0, 0))[0] - early.get(f, (0, 0))[0],
        reverse=True,
    )
    head = (
        f"flat cost profile: own time in ms/turn (calls/turn), turns {EARLY[0]}-{EARLY[1]} vs "
        f"{LATE[0]}-{LATE[1]}, sorted by growth (cProfile inflates the absolute figures)"
    )
    out = [head]
    for f in growth[:top]:
        e, l_ = early.get(f, (0.0, 0.0)), late.get(f, (0.0, 0.0))
        out.append(f"  {e[0]:7.3f} ({e[1]:6.1f}) -> {l_[0]:7.3f} ({l_[1]:6.1f})  {_short(f[0])}:{f[1]}({f[2]})")
    return "\n".join(out)


def _short(path: str) -> str:
    for marker in ("site-packages/", "flue_nb/", "lib/python3"):
        i = path.find(marker)
        if i >= 0:
            return path[i + (len(marker) if marker == "site-packages/" else 0) :]
    return path


def rows_for(m: dict[str, Any], *, target: bool) -> list[Result]:
    label = "flat cost (1,000-turn conversation" + (", usage reported)" if m["usage"] else ", no usage reported)")
    rows = [
        Result(
            label,
            "ms/turn, turns 1-20 / 990-1000 (median)",
            f"{m['early_ms']:.2f} / {m['late_ms']:.2f}",
            "",
            "info",
        ),
    ]
    rows.append(
        Result(
            label,
            "process CPU ms/turn, turns 1-20 / 990-1000 (median)",
            f"{m['cpu_early_ms']:.2f} / {m['cpu_late_ms']:.2f} ({m['cpu_late_ms'] / max(m['cpu_early_ms'], 1e-9):.2f}x)",
            "",
            "info",
        )
    )
    note = f" ({m['compactions']} compactions!)" if m["compactions"] else ""
    rows.append(
        Result(
            label,
            "ratio turn ~1000 / turn ~10",
            f"{m['ratio']:.2f}x{note}",
            "<= 1.5x" if target else "",
            verdict(m["ratio"] <= 1.5 and not m["compactions"]) if target else "info",
        )
    )
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
    ap.add_argument("--profile", action="store_true", help="profile the two windows")
    opts = ap.parse_args()
    m = measure(opts.turns, profile=opts.profile)
    rows = rows_for(m, target=True)
    if opts.profile:
        print(m["profile"])
    if opts.no_usage:
        m = measure(opts.turns, usage=False, profile=opts.profile)
        rows += rows_for(m, target=False)
        if opts.profile:
            print(m["profile"])
    print(load_line())
    print_table(rows)


if __name__ == "__main__":
    main()
