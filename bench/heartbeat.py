"""Benchmark: what the chat views' heartbeat costs the kernel (issue 19.6).

A real kernel of this venv (tests/notebook/kernel_helpers.Kernel) opens WIDGETS widgets (real
comms, as open chat views have) and times `Heartbeat.beat()`, which sends each one a custom comm
message: the median over ROUNDS beats. The heartbeat thread does that once every `_beat.EVERY`
seconds, so its share of one core is that time over the interval. Then a CPU-bound cell is timed
with and without a heartbeat 100 times faster than the real one, to see whether a running cell
notices it. Target: under 0.1 % of a core with 10 open chats.

    .venv/bin/python bench/heartbeat.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import REPO, Result, load_line, print_table, verdict

sys.path.insert(0, str(REPO / "tests" / "notebook"))
from kernel_helpers import Kernel  # noqa: E402

WIDGETS = 10
ROUNDS = 200
TARGET_SHARE = 0.1  # per cent of one core

CELL = f"""
import json, statistics, time
import ipywidgets
from flue_nb.notebook.views.chat import _heartbeat as _beat
ws = [ipywidgets.Widget() for _ in range({WIDGETS})]
hb = _beat.Heartbeat(lambda: ws, every=3600)
samples = []
for _ in range({ROUNDS}):
    t0 = time.perf_counter(); hb.beat(); samples.append((time.perf_counter() - t0) * 1000)

def busy():
    t0 = time.perf_counter(); sum(i * i for i in range(3_000_000)); return time.perf_counter() - t0

quiet = statistics.median(busy() for _ in range(5))
fast = _beat.Heartbeat(lambda: ws, every=_beat.EVERY / 100)
beating = statistics.median(busy() for _ in range(5))
fast.stop()
print(json.dumps({{"beat_ms": statistics.median(samples), "every": _beat.EVERY, "sent": hb.sent,
                  "quiet_s": quiet, "beating_s": beating, "fast_sent": fast.sent}}))
"""


def measure() -> dict[str, float]:
    """The kernel's figures (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "work").mkdir()
        kernel = Kernel(root, root / "work")
        try:
            run = kernel.run(CELL, timeout=300)
        finally:
            kernel.shutdown()
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("{")][-1]
    return dict(json.loads(line))


def rows_for(m: dict[str, float]) -> list[Result]:
    share = 100 * m["beat_ms"] / 1000 / m["every"]
    slower = 100 * (m["beating_s"] / m["quiet_s"] - 1)
    return [
        Result("chat heartbeat", f"one beat to {WIDGETS} open chats", f"{m['beat_ms']:.3f} ms", "", "info"),
        Result(
            "chat heartbeat",
            f"share of one core (a beat every {m['every']:g} s)",
            f"{share:.4f} %",
            f"< {TARGET_SHARE} %",
            verdict(share < TARGET_SHARE),
        ),
        Result(
            "chat heartbeat",
            f"a CPU-bound cell with beats 100x as often ({int(m['fast_sent'])} sent)",
            f"{slower:+.1f} % time ({m['quiet_s'] * 1000:.0f} -> {m['beating_s'] * 1000:.0f} ms)",
            "",
            "info",
        ),
    ]


def run(quick: bool = False) -> list[Result]:
    """For bench/run.py."""
    return rows_for(measure())


def main() -> None:
    print(load_line())
    print_table(rows_for(measure()))


if __name__ == "__main__":
    main()
