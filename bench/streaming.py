"""Benchmark: a 10,000-delta streamed answer in a `%%flue` cell: display messages and kernel CPU.

In a fresh interpreter, an IPython `InteractiveShell` gets a counting display publisher (what
ipykernel turns into iopub `display_data` / `update_display_data`), loads `%load_ext flue_nb`
and runs `%%flue --agent streamer` where the agent's offline model answers 10,000 words, i.e.
10,000 `text_delta` events. Reported: text deltas the runtime emitted, display messages sent
(new displays and updates: the live view must be throttled, not one update per delta), process
CPU time of the whole cell (all threads: process_time), and whether the final displayed text is
the answer verbatim. For comparison, the same answer through `Session.prompt` with no display
gives the runtime's own CPU cost.

Two paces: `instant` (the model yields as fast as it can) and `paced` (an asyncio sleep between
deltas, ~a few seconds in all, closer to a real stream where throttling matters most).

    .venv/bin/python bench/streaming.py [--deltas 10000] [--pace 0.0003]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, print_table, python_json, verdict

DELTAS = 10_000

CHILD = r"""
import json, os, sys, threading, time
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.displaypub import DisplayPublisher
from _util import temp_dir

deltas, pace = int(sys.argv[1]), float(sys.argv[2])

class CountingPublisher(DisplayPublisher):
    # What ipykernel's ZMQDisplayPublisher would send as display_data / update_display_data.
    def __init__(self, **kw):
        super().__init__(**kw)
        self.lock = threading.Lock()
        self.new = self.updates = 0
        self.last_new = None
    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kw):
        with self.lock:
            if update:
                self.updates += 1
            else:
                self.new += 1
                self.last_new = data
    def reset(self):
        with self.lock:
            self.new = self.updates = 0
            self.last_new = None

shell = InteractiveShell.instance()
pub = CountingPublisher(shell=shell)
shell.display_pub = pub
shell.run_line_magic("load_ext", "flue_nb")

import flue_nb as flue
from flue_nb.models import FunctionModel, reply

text = "".join(f"w{i} " for i in range(deltas - 1)) + f"w{deltas - 1}"
answers = ["warm up", text, "warm up", text]
model = FunctionModel(lambda req: reply(answers.pop(0)), delay=pace)

@flue.agent
def streamer():
    flue.use_model(model)
    return "You are helpful."

shell.user_ns["streamer"] = streamer
db = os.path.join(temp_dir("flue-bench-stream-"), "s.sqlite")
session = flue.init(streamer, db=db, conversation="stream")
counts = {"text_delta": 0}
def observe(ev):
    if ev.type == "text_delta":
        counts["text_delta"] += 1
session.observe(observe)

def cell():
    result = shell.run_cell(f"%%flue --agent streamer -c stream --db {db}\nsay it")
    if not result.success:
        raise SystemExit(f"cell failed: {result.error_in_exec or result.error_before_exec!r}")

cell()  # warm-up: imports, tiktoken, the store
pub.reset(); counts["text_delta"] = 0
cpu0, t0 = time.process_time(), time.perf_counter()
cell()
cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
final = (pub.last_new or {}).get("text/plain", "")
stored = session.history()[-1].text

# The runtime alone: same answer, no display, a no-op observer.
plain = flue.init(streamer, db=":memory:", conversation="plain")
plain.prompt("warm up")
plain.observe(lambda ev: None)
cpu1, t1 = time.process_time(), time.perf_counter()
answer = plain.prompt("say it")
rt_cpu, rt_wall = time.process_time() - cpu1, time.perf_counter() - t1
print(json.dumps({
    "deltas_emitted": counts["text_delta"], "new_displays": pub.new, "updates": pub.updates,
    "cpu_s": cpu, "wall_s": wall, "final_has_text": text in final, "stored_equal": stored == text,
    "runtime_cpu_s": rt_cpu, "runtime_wall_s": rt_wall, "runtime_equal": answer == text,
}))
"""


def measure(deltas: int = DELTAS, pace: float = 0.0) -> dict[str, Any]:
    code = f"import sys; sys.argv = ['x', '{deltas}', '{pace}']\n" + CHILD
    m = python_json(code, timeout=600)
    m["pace"] = pace
    return m


def rows_for(m: dict[str, Any], interval: float = 0.1) -> list[Result]:
    label = f"streaming %%flue, {m['deltas_emitted']:,} deltas " + (
        "(instant)" if not m["pace"] else f"(paced {m['pace'] * 1000:g} ms/delta)"
    )
    sent = m["new_displays"] + m["updates"]
    # Throttled: at most one update per interval of wall time, plus the first and final ones.
    bound = math.ceil(m["wall_s"] / interval) + 4
    ok_text = m["final_has_text"] and m["stored_equal"]
    return [
        Result(
            label,
            "display messages sent (display_data + update_display_data)",
            f"{sent} ({m['new_displays']} + {m['updates']}) in {m['wall_s']:.2f} s",
            f"<= {bound} (10/s)",
            verdict(sent <= bound),
        ),
        Result(
            label,
            "kernel CPU for the cell (all threads)",
            f"{m['cpu_s'] * 1000:.0f} ms; runtime alone {m['runtime_cpu_s'] * 1000:.0f} ms",
            "",
            "info",
        ),
        Result(
            label,
            "final displayed + stored text == streamed answer",
            str(ok_text),
            "True",
            verdict(ok_text),
        ),
    ]


def run(quick: bool = False) -> list[Result]:
    rows = rows_for(measure())
    if not quick:
        rows += rows_for(measure(pace=0.0003))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deltas", type=int, default=DELTAS)
    ap.add_argument("--pace", type=float, default=0.0)
    opts = ap.parse_args()
    m = measure(opts.deltas, opts.pace)
    print(load_line())
    print(m)
    print_table(rows_for(m))


if __name__ == "__main__":
    main()
