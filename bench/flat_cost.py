"""Benchmark: flat cost as a conversation grows, ms/turn early vs at turn 1,000.

One conversation of 1,000 turns on a SQLite file store: turns 1..999 ask for one small `read`,
turn 1,000 answers; the model reports usage every turn, growing as a real provider's would.
Each turn is timed from its `turn_start` event to the next (the last one to settlement), taken
by an observer on the runtime thread. Figures: median ms/turn of turns 1-20 and of turns
990-1,000, and their ratio (target <= 1.5: token accounting and the store are incremental).
The same windows in process CPU time are an extra row. Both pairs of windows are ~15 ms of work
taken seconds apart, and this machine's speed moves between them (a VM: its CPU clock stretches
too), so the target is on a third figure: a fresh conversation and one 990 turns long, their turns
let through one at a time in alternation (21 each), ms from a model call's answer to the next
model call, medians (`interleaved`).

`--no-usage` runs the same conversation with a model that reports no usage (the runtime then
estimates every message itself), as an extra row.

    .venv/bin/python bench/flat_cost.py [--turns 1000] [--no-usage]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import threading
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


PAIRS = 21


class _Gate:
    """Holds a conversation's model calls once `free` have gone by, one turn per `step()`: the
    turn's cost is from the release of one model call to the arrival of the next."""

    def __init__(self, loop: ReadLoop, free: int) -> None:
        self.free, self.calls = free, 0
        self.arrived = threading.Event()
        self.go: asyncio.Event | None = None
        self.runtime: asyncio.AbstractEventLoop | None = None
        self.released = 0.0
        self.costs: list[float] = []
        inner = loop.model.fn  # type: ignore[attr-defined]

        async def gated(request: Any) -> Any:
            self.calls += 1
            if self.calls > self.free:
                now = time.perf_counter()
                if self.released:
                    self.costs.append((now - self.released) * 1000)
                self.runtime, self.go = asyncio.get_running_loop(), asyncio.Event()
                self.arrived.set()
                await self.go.wait()
                self.released = time.perf_counter()
            return inner(request)

        loop.model.fn = gated  # type: ignore[attr-defined]

    def wait(self) -> None:
        if not self.arrived.wait(120):
            raise RuntimeError("flat cost (interleaved): a conversation stopped coming back to its model")
        self.arrived.clear()

    def step(self, *, last: bool = False) -> None:
        """Let one turn run and wait for the next model call (`last`: let the rest run)."""
        if last:
            self.free = 1 << 30
        assert self.runtime is not None and self.go is not None
        self.runtime.call_soon_threadsafe(self.go.set)
        if not last:
            self.wait()


def interleaved(pairs: int = PAIRS, deep: int = LATE[0] - 1, *, usage: bool = True) -> dict[str, Any]:
    """ms per turn of a fresh conversation and of one `deep` turns long, their turns taken in
    alternation (the same seconds of the same machine, which the two windows of `measure` are
    not): from a model call's answer to the next model call, medians of `pairs` turns each."""
    gates, sessions, done = {}, {}, {}
    for name, free, turns in (("fresh", 0, pairs + 2), ("deep", deep, deep + pairs + 2)):
        workdir = temp_dir(f"flue-bench-flat-{name}-")
        loop = ReadLoop(workdir, turns, usage=usage)
        gates[name] = _Gate(loop, free)
        sessions[name] = loop.session(os.path.join(workdir, "flat.sqlite"), f"flat-{name}-{usage}")
    threads = [
        threading.Thread(target=lambda n=name: done.__setitem__(n, sessions[n].prompt(PROMPT)), daemon=True)
        for name in sessions
    ]
    for t in threads:
        t.start()
    for gate in gates.values():
        gate.wait()  # each at its first held model call: turn 1 of one, turn `deep` + 1 of the other
    for _ in range(pairs):
        gates["fresh"].step()
        gates["deep"].step()
    for gate in gates.values():
        gate.step(last=True)
    for t in threads:
        t.join(120)
    assert done == {"fresh": "done", "deep": "done"}, done
    fresh, deep_ms = median(gates["fresh"].costs), median(gates["deep"].costs)
    return {"usage": usage, "fresh_ms": fresh, "deep_ms": deep_ms, "ratio": deep_ms / fresh, "deep": deep}


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


def rows_for(m: dict[str, Any], *, target: bool, pair: dict[str, Any] | None = None) -> list[Result]:
    """The table's rows of one `measure` (and its `interleaved` run, which carries the target)."""
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
        Result(label, "ratio turn ~1000 / turn ~10, one window after the other", f"{m['ratio']:.2f}x{note}", "", "info")
    )
    if pair is not None:
        rows.append(
            Result(
                label,
                f"ratio turn ~1000 / turn ~10, {PAIRS} turns each, alternating (ms/turn median)",
                f"{pair['ratio']:.2f}x ({pair['fresh_ms']:.2f} / {pair['deep_ms']:.2f}){note}",
                "<= 1.5x" if target else "",
                verdict(pair["ratio"] <= 1.5 and not m["compactions"]) if target else "info",
            )
        )
    return rows


def run(quick: bool = False) -> list[Result]:
    rows = rows_for(measure(), target=True, pair=interleaved())
    if not quick:
        rows += rows_for(measure(usage=False), target=False, pair=interleaved(usage=False))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=TURNS)
    ap.add_argument("--no-usage", action="store_true", help="also run without reported usage")
    ap.add_argument("--profile", action="store_true", help="profile the two windows")
    opts = ap.parse_args()
    m = measure(opts.turns, profile=opts.profile)
    deep = min(LATE[0], opts.turns)
    rows = rows_for(m, target=True, pair=interleaved(deep=deep))
    if opts.profile:
        print(m["profile"])
    if opts.no_usage:
        m = measure(opts.turns, usage=False, profile=opts.profile)
        rows += rows_for(m, target=False, pair=interleaved(deep=deep, usage=False))
        if opts.profile:
            print(m["profile"])
    print(load_line())
    print_table(rows)


if __name__ == "__main__":
    main()
