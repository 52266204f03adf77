"""Run every benchmark and print one table: benchmark, metric, value, target, verdict.

These are measurements on a shared, noisy machine, not timed tests: each figure is a median (or
a ratio of medians) taken in this one run; nothing here fails a build. Details (the loop
profile, the raw outputs of the reused scripts) are printed before the table.

    .venv/bin/python bench/run.py [--quick] [--only loop,flat,grep,read,startup,first,firstcells,stream,status,store,memory,bigfiles,images,celllog,serve,cache,tracing,follow,mcpbig,adversarial,heartbeat,sandbox,effects,verify,scale]

`make bench` runs it in full (about 3-5 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import BENCH_DIR, Result, load_line, print_table, verdict

GREP_TARGET = 1.2  # from bench/grep_vs_rg.py
_GREP_ROW = re.compile(r"^(?P<label>.+?)\s+(?P<rg>[\d.]+)ms\s+(?P<tool>[\d.]+)ms\s+(?P<ratio>[\d.]+)x")


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def grep(quick: bool) -> list[Result]:
    """bench/grep_vs_rg.py (another engineer's script), run as is; its rows parsed."""
    argv = [sys.executable, str(BENCH_DIR / "grep_vs_rg.py")]
    if quick:
        argv += ["--files", "5000", "--reps", "7"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    print(proc.stdout, end="")
    if proc.returncode != 0:
        return [Result("grep tool vs rg", "ratio", f"failed: {proc.stderr[-200:]!r}", "", "n/a")]
    files = re.search(r"tree: (\d+) files", proc.stdout)
    name = f"grep tool vs raw rg ({int(files.group(1)):,} files)" if files else "grep tool vs rg"
    rows = []
    for line in proc.stdout.splitlines():
        m = _GREP_ROW.match(line)
        if m:
            ratio = float(m["ratio"])
            rows.append(
                Result(
                    name,
                    f"{m['label'].strip()}: tool / rg",
                    f"{ratio:.2f}x ({m['tool']} vs {m['rg']} ms)",
                    f"<= {GREP_TARGET}x",
                    verdict(ratio <= GREP_TARGET),
                )
            )
    return rows or [Result(name, "ratio", "could not parse grep_vs_rg.py output", "", "n/a")]


def store(quick: bool) -> list[Result]:
    """bench/store.py (another engineer's module): its `bench()` per durability setting."""
    from store import bench as store_bench

    rows = []
    for sync in ("NORMAL", "FULL"):
        for case, mode, s, _n, _elapsed, rate in store_bench(sync, 0.5 if quick else 1.0):
            unit = "admissions/s" if case.startswith("admit") else "records/s"
            rows.append(
                Result(
                    f"store (file, {mode}, synchronous={s})",
                    f"{case}",
                    f"{rate:,.0f} {unit}",
                    "",
                    "info",
                )
            )
    rows += _store_shared(quick)
    return rows


def _store_shared(quick: bool) -> list[Result]:
    """PostgreSQL rows of bench/store.py, and two processes sharing one conversation."""
    from store import bench_postgres, postgres_url, two_processes

    rows = []
    n = 30 if quick else 100
    with tempfile.TemporaryDirectory() as tmp:
        runs = [("sqlite", two_processes(os.path.join(tmp, "two.sqlite"), n))]
    try:
        with postgres_url() as url:
            for case, _mode, s, _n, _elapsed, rate in bench_postgres(url, 0.5 if quick else 1.0):
                unit = "admissions/s" if case.startswith("admit") else "records/s"
                rows.append(Result(f"store (postgres, {s})", case, f"{rate:,.0f} {unit}", "", "info"))
            runs.append(("postgres", two_processes(url, n)))
    except RuntimeError as exc:
        rows.append(Result("store (postgres)", "not measured", str(exc)[:80], "", "n/a"))
    for label, r in runs:
        rows.append(
            Result(
                f"two processes, one conversation ({label})",
                f"{r['messages']} messages",
                f"{r['messages_per_s']:.1f} msg/s, {r['lost']} lost, {r['duplicated']} duplicated",
                "0 lost, 0 duplicated",
                verdict(r["lost"] == 0 and r["duplicated"] == 0),
            )
        )
    return rows


def _loop(quick: bool) -> list[Result]:
    import loop_vs_peer

    rows, profile = loop_vs_peer.run(quick)
    if profile:
        print(profile)
    return rows


def _module(name: str) -> Callable[[bool], list[Result]]:
    def go(quick: bool) -> list[Result]:
        mod = __import__(name)
        return mod.run(quick)

    return go


BENCHES: list[tuple[str, str, Callable[[bool], list[Result]]]] = [
    ("loop", "loop overhead vs pydantic-ai", _loop),
    ("flat", "flat cost over 1,000 turns", _module("flat_cost")),
    ("grep", "grep tool vs rg", grep),
    ("read", "read window of a 1 GiB file", _module("read_window")),
    ("startup", "start-up", _module("startup")),
    ("first", "first %%flue cell of a fresh kernel", _module("first_cell")),
    ("firstcells", "first `cells` call of a served kernel", _module("first_cells")),
    ("stream", "streaming %%flue", _module("streaming")),
    ("status", "status() as a conversation grows", _module("status_cost")),
    ("store", "store throughput", store),
    ("memory", "memory of a 1,000-turn conversation", _module("memory")),
    ("bigfiles", "memory of a 1 GiB edit and a 20 MiB write", _module("big_files")),
    ("images", "store of a 1,000-turn conversation with 50 figures", _module("images")),
    ("celllog", "cell log overhead on the user's cells", _module("cell_log")),
    ("serve", "%flue serve: an MCP call into a kernel", _module("serve")),
    ("cache", "prompt-cache share of a 100-call session", _module("prompt_cache")),
    ("tracing", "tracing cost per turn (no-op exporter)", _module("tracing_cost")),
    ("follow", "commit to redraw in another process (notify vs poll)", _module("follow_delay")),
    ("mcpbig", "a huge MCP tool result, stdio and HTTP", _module("mcp_big_result")),
    (
        "adversarial",
        "lost, duplicated, hangs, tracebacks, leaks, unfenced, overspent, late, untrue, ran on, retried (issues 20, 32)",
        _module("adversarial"),
    ),
    ("heartbeat", "the chat views' heartbeat", _module("heartbeat")),
    ("sandbox", "the sandbox's cost per bash call", _module("sandbox_cost")),
    ("effects", "recording a python call's effects", _module("effects_cost")),
    ("verify", "flue-nb verify of the tour notebooks", _module("verify_tours")),
    ("scale", "100, 1,000 and 10,000 submissions: turn, status, chat, history", _module("scale")),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer reps and smaller inputs")
    ap.add_argument("--only", default="", help="comma-separated subset: " + ",".join(k for k, _, _ in BENCHES))
    opts = ap.parse_args()
    only = {s.strip() for s in opts.only.split(",") if s.strip()}
    rows: list[Result] = []
    broken: list[str] = []
    t0 = time.perf_counter()
    _log(load_line())
    for key, title, fn in BENCHES:
        if only and key not in only:
            continue
        _log(f"{title} ...")
        start = time.perf_counter()
        try:
            rows += fn(opts.quick)
        except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
            traceback.print_exc()
            rows.append(Result(title, "error", f"{type(exc).__name__}: {exc}"[:120], "", "n/a"))
            broken.append(title)
        _log(f"{title}: {time.perf_counter() - start:.1f} s")
    print()
    print(
        f"flue_nb benchmarks ({'quick' if opts.quick else 'full'}; {load_line()}; "
        f"{time.perf_counter() - t0:.0f} s in all; Python {sys.version.split()[0]})"
    )
    print_table(rows)
    if broken:
        # Every other row is printed first; a benchmark that errors is still a broken build.
        print(f"\n{len(broken)} benchmark(s) raised an error: {'; '.join(broken)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
