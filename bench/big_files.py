"""Benchmark: peak RSS when the model edits a huge file or writes a big one (issue 12, point 12).

Each scenario runs in a fresh interpreter: an agent on a SQLite file store whose scripted model
makes one tool call, then answers. Reported: the peak RSS (VmHWM) rise over the baseline taken
after imports and a warm-up conversation, and what the tool answered.

- `edit`: `edit` of a file of `--edit-mb` MiB (default 1024), replacing one unique line near
  its end.
- `write`: `write` of `--write-mb` MiB (default 20) of text.

Not a timed test: the figures are printed, nothing fails.

    .venv/bin/python bench/big_files.py [--edit-mb 1024] [--write-mb 20] [--only edit,write]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, print_table, python_json

CHILD = r"""
import json, os, sys, time
from _util import maxrss_kib, temp_dir
import flue_nb as flue
from flue_nb.models import FunctionModel, ScriptedModel, reply, tool_call

scenario, mb, compaction = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
workdir = temp_dir("flue-bench-big-")
db = os.path.join(workdir, "big.sqlite")
MIB = 1 << 20
TEXT = "".join(f"def function_{i}(x):\n    return x * {i} + len('quick brown fox')\n" for i in range(1000))

def agent_for(model):
    @flue.agent
    def big():
        flue.use_model(model, compaction=compaction)
        flue.use_sandbox(flue.local(workdir))
        return "You edit files."
    return big

# Warm-up: the same kind of call on a small file, so imports and caches are in the baseline.
with open(os.path.join(workdir, "small.txt"), "w") as f:
    f.write("alpha\nbeta\n")
warm = ScriptedModel([
    reply("", tool_call("edit", path="small.txt", old_text="beta", new_text="gamma")),
    reply("", tool_call("write", path="small2.txt", content="x" * 1000)),
    reply("ok"),
])
assert flue.init(agent_for(warm), db=db, conversation="warm").prompt("go") == "ok"
base = maxrss_kib()

if scenario == "edit":
    path = os.path.join(workdir, "huge.txt")
    line = b"the quick brown fox jumps over the lazy dog 0123456789\n"  # 55 bytes
    block = line * (MIB // len(line))
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(block)
        f.write(b"UNIQUE MARKER LINE\n")
        f.write(block[: 4096])
    size = os.path.getsize(path)
    call = tool_call("edit", path="huge.txt", old_text="UNIQUE MARKER LINE", new_text="CHANGED")
else:
    size = mb * MIB
    call = tool_call("write", path="big.txt", content=(TEXT * (size // len(TEXT) + 1))[:size])

def answer(request):
    if request.purpose != "turn":  # a 20 MB call fills the window: compaction summarises it
        return reply("The model wrote or edited a big file.")
    return reply("done") if len(request.messages) > 1 else reply("", call)

model = FunctionModel(answer)
session = flue.init(agent_for(model), db=db, conversation="big")
t0 = time.perf_counter()
final = session.prompt("go")
seconds = time.perf_counter() - t0
peak = maxrss_kib()
results = [m for r in model.requests for m in r.messages if getattr(m, "kind", "") == "tool_result"]
result = results[-1].content if results else "(compacted away)"
ok = None
if scenario == "edit":
    with open(path, "rb") as f:
        f.seek(size - 4096 - 19 - 10)
        ok = b"CHANGED\n" in f.read(64)
print(json.dumps({"scenario": scenario, "mb": mb, "base_kib": base, "peak_kib": peak,
                  "compaction": compaction, "seconds": seconds, "answer": final, "result": result[:300], "edited": ok}))
"""


def measure(scenario: str, mb: int, compaction: bool = True) -> dict[str, Any]:
    code = f"import sys; sys.argv = ['x', {scenario!r}, '{mb}', '{int(compaction)}']\n" + CHILD
    return python_json(code, timeout=1200)


def rows_for(m: dict[str, Any]) -> list[Result]:
    rise = (m["peak_kib"] - m["base_kib"]) / 1024
    what = f"`{m['scenario']}` of a {m['mb']:,} MiB file"
    return [
        Result(
            f"big files ({what})",
            "peak RSS rise over baseline",
            f"+{rise:.0f} MiB (peak {m['peak_kib'] / 1024:.0f} MiB, {m['seconds']:.1f} s); "
            f"tool said: {m['result'][:90]!r}",
            "",
            "info",
        )
    ]


def run(quick: bool = False) -> list[Result]:
    rows = rows_for(measure("write", 20))
    rows += rows_for(measure("edit", 64 if quick else 1024))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--edit-mb", type=int, default=1024)
    ap.add_argument("--write-mb", type=int, default=20)
    ap.add_argument("--only", default="write,edit")
    opts = ap.parse_args()
    print(load_line())
    rows: list[Result] = []
    for name in opts.only.split(","):
        m = measure(name, opts.write_mb if name == "write" else opts.edit_mb)
        print(m)
        rows += rows_for(m)
    print_table(rows)


if __name__ == "__main__":
    main()
