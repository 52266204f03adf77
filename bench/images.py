"""Benchmark: the store of a 1,000-turn conversation with 50 figures (issue 14.4).

One conversation runs 1,000 model turns on a SQLite file: every 20th turn the model has the
`python` tool draw a new matplotlib figure (a 6.4 × 4.8 in line plot with 200 points, each one
different), the other turns `read` a small file, the last turn answers. The figures stay in the
context window, so every later request carries them again. Reported: the store file's size after
a checkpoint, how much of it is image bytes (the `blobs` table: each figure once, by sha256),
and, for scale, the image bytes the model requests carried in total (what a store keeping
images inline in each request, or in each message it re-sends, would grow by).

Documented target: the store stays under `TARGET_MB` (8 MB). Measured (2026-11-30, this
machine): 4.3 MB — the 50 figures once (3.4 MB of PNG, ≈ 68 KB each) and 0.5 MB of JSON
records (≈ 265 bytes per record); the requests carried 1.5 GB of image bytes in total, none of it
stored again. About 7 s.

    .venv/bin/python bench/images.py [--turns 1000] [--figures 50]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, print_table, python_json

TURNS = 1000
FIGURES = 50
TARGET_MB = 8.0

CHILD = r"""
import json, os, sqlite3, sys, time
os.environ["MPLBACKEND"] = "Agg"
from _util import SMALL, temp_dir
import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call

turns, figures = int(sys.argv[1]), int(sys.argv[2])
every = turns // figures
workdir = temp_dir("flue-bench-img-")
with open(os.path.join(workdir, "small.txt"), "w") as f:
    f.write(SMALL)
db = os.path.join(workdir, "img.sqlite")
PLOT = (
    "import math\nimport matplotlib.pyplot as plt\n"
    "xs = [i / 20 for i in range(200)]\n"
    "plt.plot(xs, [math.sin(x * {k}) + {k} / 10 for x in xs])\nplt.title('figure {k}')"
)
calls = 0
sent = 0  # image bytes carried by the requests, summed over requests

def fn(request):
    global calls, sent
    calls += 1
    sent += sum(len(p.data or b"") for p in request.images)
    usage = (2_000 + 100 * calls, 30)
    if calls >= turns:
        return reply("done", usage=usage)
    if (calls - 1) % every == 0:
        return reply("", tool_call("python", code=PLOT.format(k=(calls - 1) // every + 1)), usage=usage)
    return reply("", tool_call("read", path="small.txt"), usage=usage)

@flue.agent(max_turns=turns + 10)
def plotter():
    flue.use_model(FunctionModel(fn))
    flue.use_sandbox(flue.kernel(workdir, namespace={}))
    return "You plot."

start = time.perf_counter()
s = flue.init(plotter, db=db, cwd=workdir, conversation="images")
assert s.prompt("plot fifty things") == "done"
elapsed = time.perf_counter() - start
s.store.close()
conn = sqlite3.connect(db)
conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
blob_bytes, blob_count = conn.execute("SELECT coalesce(sum(length(data)), 0), count(DISTINCT digest) FROM blobs").fetchone()
record_bytes, records = conn.execute("SELECT coalesce(sum(length(data)), 0), count(*) FROM records").fetchone()
conn.close()
size = os.path.getsize(db) + (os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0)
print(json.dumps({"file_bytes": size, "blob_bytes": blob_bytes, "figures": blob_count,
                  "record_bytes": record_bytes, "records": records, "sent_bytes": sent,
                  "turns": calls, "seconds": elapsed}))
"""


def measure(turns: int = TURNS, figures: int = FIGURES) -> dict[str, Any]:
    """Run the conversation in a fresh interpreter and return its measurements."""
    code = f"import sys; sys.argv = ['x', '{turns}', '{figures}']\n" + CHILD
    return python_json(code, timeout=900)


def rows_for(m: dict[str, Any]) -> list[Result]:
    """The table rows for one measurement."""
    mb = m["file_bytes"] / 1e6
    name = f"store of a {m['turns']:,}-turn conversation with {m['figures']} figures"
    return [
        Result(
            name,
            "SQLite file (after checkpoint)",
            f"{mb:.1f} MB",
            f"<= {TARGET_MB:g} MB",
            "met" if mb <= TARGET_MB else "MISSED",
        ),
        Result(
            name,
            "image bytes stored (each figure once)",
            f"{m['blob_bytes'] / 1e6:.2f} MB in {m['figures']} blobs",
            "",
            "info",
        ),
        Result(
            name, "message records (JSON)", f"{m['record_bytes'] / 1e6:.2f} MB in {m['records']:,} records", "", "info"
        ),
        Result(name, "image bytes the requests carried", f"{m['sent_bytes'] / 1e6:,.0f} MB (not stored)", "", "info"),
        Result(name, "run time", f"{m['seconds']:.1f} s", "", "info"),
    ]


def run(quick: bool) -> list[Result]:
    """`bench/run.py` entry: the full 1,000 turns (about 7 s), 200 with `--quick`."""
    return rows_for(measure(200, 10) if quick else measure())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=TURNS)
    ap.add_argument("--figures", type=int, default=FIGURES)
    opts = ap.parse_args()
    print_table(rows_for(measure(opts.turns, opts.figures)))


if __name__ == "__main__":
    main()
