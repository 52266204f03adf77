"""Benchmark: start-up cost of `import flue_nb` and `%load_ext flue_nb` in fresh interpreters.

* import: median wall time of N `python -c "import flue_nb"` subprocesses minus the median of N
  `python -c pass` (runs interleaved); target under 150 ms.
* load_ext: a fresh `python -c` creates an IPython `InteractiveShell` and times
  `extension_manager.load_extension("flue_nb")` inside the process (shell creation excluded).
* peer: the same two figures for `jupyter_ai_magics`, from a throwaway venv kept out of ours
  (`PEER_VENV`: `pip install jupyter-ai-magics ipython`). `bench/run.py` makes it when it is
  missing (`--setup-peer` here); if it does not install, the peer rows say so.

    .venv/bin/python bench/startup.py [--runs 11] [--setup-peer]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import REPO, Result, load_line, median, print_table, verdict

PEER_VENV = os.environ.get("FLUE_BENCH_PEER_VENV", "/tmp/flue-bench-jaim")
IMPORT_TARGET_MS = 150

LOAD_EXT = r"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
mod = sys.argv[1]
t0 = time.perf_counter()
status = shell.extension_manager.load_extension(mod)
t1 = time.perf_counter()
heavy = sorted(m for m in ("anthropic", "tiktoken", "pydantic", "ipywidgets", "anywidget",
                           "langchain", "langchain_core") if m in sys.modules)
print(json.dumps({"ms": (t1 - t0) * 1000, "status": status, "heavy": heavy}))
"""


def _wall(python: str, code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([python, "-c", code], check=True, cwd=str(REPO), capture_output=True)
    return (time.perf_counter() - t0) * 1000


def import_ms(python: str, module: str, runs: int) -> dict[str, float]:
    """Median ms of `import module` and of `pass` in fresh interpreters, interleaved."""
    _wall(python, f"import {module}")  # warm the page cache and .pyc files
    imp, bare = [], []
    for _ in range(runs):
        bare.append(_wall(python, "pass"))
        imp.append(_wall(python, f"import {module}"))
    return {"import": median(imp), "bare": median(bare), "net": median(imp) - median(bare)}


def load_ext_ms(python: str, module: str, runs: int) -> dict[str, Any]:
    """Median ms of `load_extension(module)` in a fresh InteractiveShell (shell creation excluded)."""
    out = []
    last: dict[str, Any] = {}
    for _ in range(runs + 1):
        proc = subprocess.run(
            [python, "-c", LOAD_EXT, module],
            capture_output=True,
            text=True,
            cwd=str(REPO),
            check=False,
            # flue_nb's extension starts a background import of what the first cell needs; left
            # on, it races the `heavy` check below (bench/first_cell.py measures what it buys).
            env={**os.environ, "FLUE_WARMUP": "0"},
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        last = json.loads(proc.stdout.strip().splitlines()[-1])
        out.append(last["ms"])
    return {"ms": median(out[1:]), "status": last["status"], "heavy": last["heavy"]}


def peer_python() -> str | None:
    py = os.path.join(PEER_VENV, "bin", "python")
    if not os.path.exists(py):
        return None
    ok = subprocess.run([py, "-c", "import jupyter_ai_magics"], capture_output=True, check=False)
    return py if ok.returncode == 0 else None


def setup_peer() -> str:
    """Make the throwaway peer venv (needs the package registry); "ok" or what went wrong."""
    try:
        subprocess.run([sys.executable, "-m", "venv", PEER_VENV], check=True, timeout=120)
        proc = subprocess.run(
            [
                os.path.join(PEER_VENV, "bin", "pip"),
                "install",
                "-q",
                "jupyter-ai-magics",
                "ipython",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=400,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok" if proc.returncode == 0 else proc.stderr.strip().splitlines()[-1][:200]


def measure(runs: int = 11, peer_runs: int = 5, setup: bool = False) -> dict[str, Any]:
    py = sys.executable
    m: dict[str, Any] = {
        "flue_import": import_ms(py, "flue_nb", runs),
        "flue_load_ext": load_ext_ms(py, "flue_nb", max(3, runs // 2)),
    }
    peer = peer_python()
    m["peer_setup"] = None
    if peer is None and setup:
        m["peer_setup"] = setup_peer()
        peer = peer_python()
    if peer is None:
        m["peer"] = None
    else:
        m["peer"] = {
            "import": import_ms(peer, "jupyter_ai_magics", peer_runs),
            "load_ext": load_ext_ms(peer, "jupyter_ai_magics", peer_runs),
        }
    return m


def rows_for(m: dict[str, Any]) -> list[Result]:
    fi, fl = m["flue_import"], m["flue_load_ext"]
    rows = [
        Result(
            "start-up",
            "import flue_nb (fresh python, net of `python -c pass`)",
            f"{fi['net']:.0f} ms ({fi['import']:.0f} - {fi['bare']:.0f})",
            f"< {IMPORT_TARGET_MS} ms",
            verdict(fi["net"] < IMPORT_TARGET_MS),
        ),
        Result(
            "start-up",
            "%load_ext flue_nb (fresh InteractiveShell)",
            f"{fl['ms']:.0f} ms" + (f"; loads {', '.join(fl['heavy'])}" if fl["heavy"] else ""),
            "",
            "info",
        ),
    ]
    p = m["peer"]
    if p is None:
        why = (
            f"did not install: {m['peer_setup']}"
            if m.get("peer_setup")
            else f"no peer venv at {PEER_VENV} (run --setup-peer)"
        )
        rows.append(Result("start-up", "jupyter_ai_magics (peer)", f"not measured: {why}", "", "n/a"))
    else:
        rows.append(
            Result(
                "start-up",
                "import jupyter_ai_magics (peer, net)",
                f"{p['import']['net']:.0f} ms",
                "",
                "info",
            )
        )
        rows.append(
            Result(
                "start-up",
                "%load_ext jupyter_ai_magics (peer)",
                f"{p['load_ext']['ms']:.0f} ms",
                "",
                "info",
            )
        )
        rows.append(
            Result(
                "start-up",
                "ratio flue_nb / peer (import; load_ext)",
                f"{fi['net'] / p['import']['net']:.2f}x; {fl['ms'] / p['load_ext']['ms']:.2f}x",
                "",
                "info",
            )
        )
    return rows


def run(quick: bool = False) -> list[Result]:
    return rows_for(measure(runs=7 if quick else 11, peer_runs=3 if quick else 5, setup=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--setup-peer", action="store_true")
    opts = ap.parse_args()
    m = measure(opts.runs, setup=opts.setup_peer)
    print(load_line())
    print(json.dumps(m, indent=1))
    print_table(rows_for(m))


if __name__ == "__main__":
    main()
