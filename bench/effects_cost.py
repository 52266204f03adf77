"""Benchmark: what recording a `python` call's effects costs (issue 34.7).

1. Time: the `python` tool (through `execute_tool`, with a SQLite store as a session's run has)
   in a namespace of 1,000 names (ints, strings, lists, dicts, small numpy arrays and pandas
   frames) running code that changes 3 of them (one rebound, one list appended to, one frame
   given a column), with effect recording on and off, interleaved call by call. Target: recording
   adds at most 5 ms (median). The old values of the 3 names are pickled into blobs; the
   namespace is never copied.
2. Store growth: the store file's growth per 100 such steps (each result recorded as a message,
   as the loop does), with recording on and off.

    .venv/bin/python bench/effects_cost.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, median, print_table, verdict

TARGET_MS = 5.0
CALLS = 200
CODE = "n3 = n3 + 1\nl5.append(1)\ndf7['c'] = df7['a'] * 2"


def _namespace() -> dict[str, Any]:
    import numpy as np
    import pandas as pd

    ns: dict[str, Any] = {"__name__": "__main__"}
    for i in range(1000):
        kind = i % 5
        ns[f"{'nsldf'[kind] if kind < 4 else 'arr'}{i}"] = (
            i
            if kind == 0
            else f"s{i}"
            if kind == 1
            else list(range(10))
            if kind == 2
            else {"k": i}
            if kind == 3
            else np.arange(100)
        )
    ns["n3"], ns["l5"] = 0, [1, 2, 3]
    ns["df7"] = pd.DataFrame({"a": range(1000), "b": range(1000)})
    assert len([k for k in ns if not k.startswith("_")]) >= 1000
    return ns


def _file_size(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


async def _measure(calls: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    from flue_nb.notebook.kernel.python_tool import python_tool
    from flue_nb.runtime.messages import ToolResultMessage, message_to_dict
    from flue_nb.runtime.store.sqlite import SQLiteStore
    from flue_nb.runtime.tools.tool import ToolContext, execute_tool

    work = tempfile.mkdtemp(prefix="flue-bench-effects-")
    times: dict[str, list[float]] = {"on": [], "off": []}
    growth: dict[str, int] = {}
    setups = {}
    for mode in ("on", "off"):
        db = os.path.join(work, f"{mode}.sqlite")
        store = SQLiteStore(db)
        store.admit("c", "go", submission_id="s1", now=time.time())
        ns = _namespace()
        setups[mode] = (python_tool(ns, record_effects=mode == "on"), store, db)
    start_sizes = {m: _file_size(db) for m, (_, _, db) in setups.items()}
    for i in range(calls):
        for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
            tool, store, _ = setups[mode]
            ctx = ToolContext(call_id=f"k{i}", conversation_id="c", submission_id="s1", store=store)
            t0 = time.perf_counter()
            out = await execute_tool(tool, {"code": CODE}, ctx)
            times[mode].append((time.perf_counter() - t0) * 1000)
            msg = ToolResultMessage(f"k{i}", "python", out.content, details=out.details)
            store.append("c", "s1", [("message", message_to_dict(msg))], now=time.time())
    for mode, (_, store, db) in setups.items():
        store.close()
        growth[mode] = (_file_size(db) - start_sizes[mode]) * 100 // calls
    return times, growth


def run(quick: bool = False, calls: int | None = None) -> list[Result]:
    """The rows for bench/run.py."""
    n = calls or (60 if quick else CALLS)
    times, growth = asyncio.run(_measure(n))
    on, off = median(times["on"]), median(times["off"])
    added = on - off
    return [
        Result(
            "effects: python call, 1,000 names, 3 changed",
            "recording adds (median)",
            f"{added:.2f} ms (on {on:.2f} / off {off:.2f} ms, {n} calls each)",
            f"<= {TARGET_MS:g} ms",
            verdict(added <= TARGET_MS),
        ),
        Result(
            "effects: store growth",
            "per 100 steps",
            f"{growth['on'] / 1024:,.0f} KiB with records and old values, {growth['off'] / 1024:,.0f} KiB without",
            "",
            "info",
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=CALLS)
    opts = ap.parse_args()
    print(load_line())
    print_table(run(calls=opts.calls))


if __name__ == "__main__":
    main()
