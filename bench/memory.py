"""Benchmark: peak RSS of one 1,000-turn conversation in one process.

A fresh interpreter runs a 1,000-turn tool loop (turns 1..999 `read` a small file, turn 1,000
answers; usage reported each turn) on a SQLite file store. Reported: peak RSS (VmHWM, which
unlike ru_maxrss is not inherited from the parent process across fork+exec) at
the end, the baseline after imports and a 2-turn warm-up conversation, and the rise.

    .venv/bin/python bench/memory.py [--turns 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, print_table, python_json

TURNS = 1000

CHILD = r"""
import json, os, sys
from _util import PROMPT, ReadLoop, maxrss_kib, temp_dir

workdir = temp_dir("flue-bench-mem-")
db = os.path.join(workdir, "mem.sqlite")
loop = ReadLoop(workdir, 2)
assert loop.session(db, "warm").prompt("go") == "done"
base = maxrss_kib()
loop.turns = int(sys.argv[1])
assert loop.session(db, "big").prompt(PROMPT) == "done"
peak = maxrss_kib()
print(json.dumps({"base_kib": base, "peak_kib": peak, "db_bytes": os.path.getsize(db)}))
"""


def measure(turns: int = TURNS) -> dict[str, Any]:
    m = python_json(f"import sys; sys.argv = ['x', '{turns}']\n" + CHILD, timeout=600)
    m["turns"] = turns
    return m


def rows_for(m: dict[str, Any]) -> list[Result]:
    rise = (m["peak_kib"] - m["base_kib"]) / 1024
    return [
        Result(
            f"memory ({m['turns']:,}-turn conversation)",
            "peak RSS (after imports: baseline)",
            f"{m['peak_kib'] / 1024:.0f} MiB (baseline {m['base_kib'] / 1024:.0f} MiB, "
            f"+{rise:.1f} MiB; {rise * 1024 / m['turns']:.1f} KiB/turn)",
            "",
            "info",
        ),
    ]


def run(quick: bool = False) -> list[Result]:
    return rows_for(measure())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=TURNS)
    opts = ap.parse_args()
    m = measure(opts.turns)
    print(load_line())
    print(m)
    print_table(rows_for(m))


if __name__ == "__main__":
    main()
