"""Benchmark: what recording a `python` call's effects costs (issue 34.7).

1. Time: the `python` tool (through `execute_tool`, with a SQLite store as a session's run has)
   in a namespace of 1,000 names (ints, strings, lists, dicts, small numpy arrays and pandas
   frames) running code that changes 3 of them (one rebound, one list appended to, one frame
   given a column), with effect recording on and off, interleaved call by call. Target: recording
   adds at most 5 ms (median). The old values of the 3 names are pickled into blobs; the
   namespace is never copied.
2. Store growth: the store file's growth per 100 such steps (each result recorded as a message,
   as the loop does), with recording on and off.
3. A 200 MB DataFrame changed in place (`df['a'] *= 2`, 5,000,000 × 5 float64), each case in a
   fresh process: the peak RSS (VmHWM, reset once the frame is built) of the change made by the
   `python` tool over the same change made by plain `exec`. Under the default cap (64 MiB a
   value) the old value is refused without a copy: target +5% of the frame at most. With the cap
   raised to 512 MiB it is kept: one copy of its pickle is the expected cost (the blob the store
   keeps), target at most 1.1 × the pickle's size; the time to keep it is mostly the store's write.
4. Files: a `python` call in a workspace of 200 and of 1,000 small files (2 KB, last written an
   hour ago) against the same call with no workspace: the bounded scan before and after the
   call (as for `bash`; small files' contents read ahead, reused while their stat is unchanged).
   No target: the scan is bounded (5,000 files, 0.25 s a side).

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
from _util import Result, load_line, median, print_table, python_json, verdict

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


BIG_FRAME = r"""
import asyncio, gc, json, os, sys, time
import numpy as np, pandas as pd
from _util import maxrss_kib, reset_peak_rss, rss_kib, temp_dir
from flue_nb.notebook.kernel.python_tool import python_tool
from flue_nb.runtime.effects import Bounds, Effects
from flue_nb.runtime.store.sqlite import SQLiteStore
from flue_nb.runtime.tools.tool import ToolContext, execute_tool

mode = sys.argv[1]
store = SQLiteStore(os.path.join(temp_dir("flue-bench-frame-"), "s.sqlite"))
store.admit("c", "go", submission_id="s1", now=time.time())
ns = {"df": pd.DataFrame(np.random.default_rng(0).random((5_000_000, 5)), columns=list("abcde"))}
frame = int(ns["df"].memory_usage(index=True).sum())
code = "df['a'] *= 2"
gc.collect()
base = rss_kib()
reset_ok = reset_peak_rss()
out = {"mode": mode, "frame": frame, "base_kib": base, "reset": reset_ok}
t0 = time.perf_counter()
if mode == "plain":
    exec(code, ns)
else:
    big = Bounds(value_bytes=512 * 2**20, step_bytes=512 * 2**20, conversation_bytes=2**30)
    tool = python_tool(ns, bounds=Bounds() if mode == "refused" else big)
    ctx = ToolContext(call_id="k", conversation_id="c", submission_id="s1", store=store)
    res = asyncio.run(execute_tool(tool, {"code": code}, ctx))
    [v] = Effects.from_details(res.details).variables
    out.update(kept=v.kept is not None, not_kept=v.not_kept, pickle=(Effects.from_details(res.details).kept_bytes or {}).get(v.kept or "", 0))
out.update(seconds=time.perf_counter() - t0, peak_kib=maxrss_kib())
print(json.dumps(out))
"""


def _big_frame() -> list[Result]:
    """Peak RSS of a 200 MB frame changed in place: plain, refused by the cap, kept under a raised cap."""
    got = {
        m: python_json(f"import sys; sys.argv = ['x', '{m}']\n" + BIG_FRAME, timeout=900)
        for m in ("plain", "refused", "kept")
    }
    plain = got["plain"]["peak_kib"] / 1024
    frame = got["plain"]["frame"] / 2**20
    rows = []
    for mode, limit in (("refused", 0.05 * frame), ("kept", None)):
        g = got[mode]
        over = g["peak_kib"] / 1024 - plain
        pickle_mib = g.get("pickle", 0) / 2**20
        if mode == "kept":
            limit = 1.1 * pickle_mib
            what = f"kept ({pickle_mib:,.0f} MiB blob, {g['seconds']:.1f} s with the store's write)"
        else:
            what = f"refused ({g['not_kept']})"
        rows.append(
            Result(
                f"effects: {frame:,.0f} MiB DataFrame changed in place, {mode}",
                "peak RSS over the plain change",
                f"+{over:,.0f} MiB (peak {g['peak_kib'] / 1024:,.0f} MiB, plain {plain:,.0f} MiB); {what}"
                + ("" if g["reset"] else "; peak not reset after the frame was built"),
                f"<= +{limit:,.0f} MiB",
                verdict(over <= limit and (g["kept"] if mode == "kept" else not g["kept"])),
            )
        )
    return rows


async def _scan_cost(files: int, calls: int) -> tuple[float, float]:
    from flue_nb.notebook.kernel.python_tool import python_tool
    from flue_nb.runtime.store.sqlite import SQLiteStore
    from flue_nb.runtime.tools.tool import ToolContext, execute_tool

    work = tempfile.mkdtemp(prefix="flue-bench-scan-")
    hour_ago = time.time() - 3600
    for i in range(files):
        d = os.path.join(work, f"d{i % 20}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"f{i}.txt")
        with open(path, "w") as f:
            f.write("x" * 2000)
        os.utime(path, (hour_ago, hour_ago))
    store = SQLiteStore(os.path.join(tempfile.mkdtemp(prefix="flue-bench-scan-db-"), "s.sqlite"))
    store.admit("c", "go", submission_id="s1", now=time.time())
    ns: dict[str, Any] = {}
    tools = {"on": python_tool(ns, workspace=work), "off": python_tool(ns)}
    times: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(calls):
        for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
            ctx = ToolContext(call_id=f"k{i}{mode}", conversation_id="c", submission_id="s1", store=store)
            t0 = time.perf_counter()
            await execute_tool(tools[mode], {"code": "x = 1"}, ctx)
            times[mode].append((time.perf_counter() - t0) * 1000)
    store.close()
    return median(times["on"]), median(times["off"])


def _workspace(calls: int) -> list[Result]:
    rows = []
    for files in (200, 1000):
        on, off = asyncio.run(_scan_cost(files, calls))
        rows.append(
            Result(
                f"effects: python call, workspace of {files:,} files",
                "the file scan adds (median)",
                f"{on - off:.1f} ms (with {on:.1f} / without {off:.1f} ms, {calls} calls each)",
                "",
                "info",
            )
        )
    return rows


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
        *_big_frame(),
        *_workspace(20 if quick else 60),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=CALLS)
    opts = ap.parse_args()
    print(load_line())
    print_table(run(calls=opts.calls))


if __name__ == "__main__":
    main()
