"""`flue-nb verify` of the tour notebooks: how long a rerun takes and what it finds (issue 34.7).

Each tour is verified as a user would from a terminal (`flue-nb verify --json`, its own process,
no API key, model requests off). Its `%%flue` cells replay their saved answers; no store is beside
the tours (they keep theirs in temporary directories), so the answers replay unchecked, which the
report lists. A tour that inspects its offline model after a `%%flue` cell (`offline.requests`)
cannot reproduce under a replay that never calls the model: those cells are counted as failing,
as verify reports them. No target: the figures are what verify costs and what it sees.

    .venv/bin/python bench/verify_tours.py [--quick]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import BENCH_DIR, Result, print_table

NOTEBOOKS = BENCH_DIR.parent / "notebooks"


def _verify(path: Path) -> tuple[float, dict | None, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ANTHROPIC_API_KEY", "FLUE_MODEL", "JPY_SESSION_NAME", "FLUE_DB")
    }
    env["FLUE_ALLOW_MODEL_REQUESTS"] = "0"
    with tempfile.TemporaryDirectory(prefix="flue-bench-verify-") as tmp:
        out = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "flue_nb.cli", "verify", str(path), "--json", str(out), "--timeout", "120"]
        argv += ["--total-timeout", "300"]
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=400, check=False, cwd=tmp, env=env)
        took = time.perf_counter() - start
        report = json.loads(out.read_text()) if out.exists() else None
        return took, report, (proc.stderr.strip().splitlines() or [""])[-1]


def run(quick: bool) -> list[Result]:
    """One row per tour: the rerun's wall time and what verify found."""
    tours = sorted(NOTEBOOKS.glob("tour_*.ipynb"))
    if quick:
        tours = [t for t in tours if t.stem in ("tour_review", "tour_notebook", "tour_tools")]
    rows = []
    total = 0.0
    for tour in tours:
        took, report, err = _verify(tour)
        total += took
        if report is None:
            rows.append(Result(f"verify {tour.name}", "rerun", f"no report ({err[:60]})", "", "n/a"))
            continue
        found = (
            "reproduces"
            if report["reproduces"]
            else f"{len(report['failing'])} cells fail, {len(report['differing'])} differ, "
            f"{len(report['hidden'])} hidden steps" + (", stopped" if report["stopped"] else "")
        )
        rows.append(Result(f"verify {tour.name}", "rerun, outcome", f"{took:.1f} s, {found}", "", "info"))
    rows.append(Result(f"verify of {len(tours)} tours", "wall time in all", f"{total:.1f} s", "", "info"))
    return rows


if __name__ == "__main__":
    print_table(run("--quick" in sys.argv))
