"""Benchmark: `read` of a 50 KB window at the end of a 1 GiB text file, and its peak memory.

Writes a 1 GiB file of 64-byte numbered lines in a temp dir (deleted afterwards), then, in a
fresh interpreter, calls the `read` tool (through `execute_tool` on a `LocalSandbox`) with an
`offset` 5,000 lines before the end: the tool must stream the whole file to count lines, so this
is its worst case. Reported: time, the rise of peak RSS (VmHWM, reset just before the read)
above the RSS before it, and the
tracemalloc peak of a second identical read. Target: RSS rise far below the file size (< 64 MiB).

    .venv/bin/python bench/read_window.py [--gib 1.0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, print_table, python_json, verdict

LINE = 64
BLOCK_LINES = 16_384  # one 1 MiB block, repeated
RSS_TARGET_MIB = 64

CHILD = r"""
import asyncio, json, os, sys, time, tracemalloc
from _util import maxrss_kib, reset_peak_rss, rss_kib
from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools.tool import ToolContext, execute_tool
from flue_nb.runtime.tools import read_tool
path, offset, expect = sys.argv[1], int(sys.argv[2]), sys.argv[3]
root = os.path.dirname(path)
tool = read_tool(LocalSandbox(root))
with open(os.path.join(root, "small.txt"), "w") as f:
    f.write("warm\n")

async def read(p, off=None):
    args = {"path": p} if off is None else {"path": p, "offset": off}
    return await execute_tool(tool, args, ToolContext(call_id="bench"))

async def main():
    await read("small.txt")  # warm-up: imports, thread pool, pydantic validators
    # Peak RSS is reset to the current RSS just before the read (else: peak so far).
    reset = reset_peak_rss()
    before = rss_kib() if reset else maxrss_kib()
    t0 = time.perf_counter()
    out = await read(os.path.basename(path), offset)
    elapsed = time.perf_counter() - t0
    after = maxrss_kib()
    assert not out.is_error, out.content[:300]
    assert out.content.startswith(expect), out.content[:100]
    tracemalloc.start()
    await read(os.path.basename(path), offset)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({"seconds": elapsed, "rss_before_kib": before, "rss_after_kib": after, "peak_reset": reset,
                      "tracemalloc_peak": peak, "chars": len(out.content),
                      "tail": out.content[-120:]}))

asyncio.run(main())
"""


def _line(i: int) -> bytes:
    s = f"line {i:08d} of a repeated block; the quick brown fox jumps"
    return (s + " " * (LINE - 1 - len(s)) + "\n").encode()


def make_file(path: str, gib: float) -> int:
    """Write the file; return its line count."""
    block = b"".join(_line(i) for i in range(BLOCK_LINES))
    assert len(block) == LINE * BLOCK_LINES == 1 << 20
    blocks = int(gib * 1024)
    with open(path, "wb") as f:
        f.writelines(block for _ in range(blocks))
    return blocks * BLOCK_LINES


def measure(gib: float = 1.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="flue-bench-read-") as d:
        path = os.path.join(d, "big.txt")
        lines = make_file(path, gib)
        size = os.path.getsize(path)
        offset = lines - 5_000
        expect = _line((offset - 1) % BLOCK_LINES).decode().rstrip("\n")
        code = f"import sys; sys.argv = ['x', {path!r}, '{offset}', {expect!r}]\n" + CHILD
        m = python_json(code, timeout=600)
    m["size"] = size
    m["rss_rise_mib"] = (m["rss_after_kib"] - m["rss_before_kib"]) / 1024
    return m


def run(quick: bool = False) -> list[Result]:
    m = measure()
    name = f"read 50 KB window @ end of {m['size'] / 2**30:.0f} GiB file"
    return [
        Result(name, "time (streams the whole file)", f"{m['seconds'] * 1000:.0f} ms", "", "info"),
        Result(
            name,
            "peak RSS rise during the read",
            f"{m['rss_rise_mib']:.1f} MiB (tracemalloc peak {m['tracemalloc_peak'] / 2**20:.1f} MiB)",
            f"< {RSS_TARGET_MIB} MiB",
            verdict(m["rss_rise_mib"] < RSS_TARGET_MIB),
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    opts = ap.parse_args()
    m = measure(opts.gib)
    print(load_line())
    print({k: v for k, v in m.items() if k != "tail"})
    print("output tail:", repr(m["tail"]))
    name = f"read 50 KB window @ end of {m['size'] / 2**30:.2f} GiB file"
    print_table(
        [
            Result(name, "time", f"{m['seconds'] * 1000:.0f} ms", "", "info"),
            Result(
                name,
                "peak RSS rise",
                f"{m['rss_rise_mib']:.1f} MiB",
                f"< {RSS_TARGET_MIB} MiB",
                verdict(m["rss_rise_mib"] < RSS_TARGET_MIB),
            ),
        ]
    )


if __name__ == "__main__":
    main()
