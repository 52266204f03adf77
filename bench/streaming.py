"""Benchmark: a 10,000-delta streamed answer in a `%%flue` cell: display messages and kernel CPU.

In a fresh interpreter, an IPython `InteractiveShell` gets a counting display publisher (what
ipykernel turns into iopub `display_data` / `update_display_data`), loads `%load_ext flue_nb`
and runs `%%flue --agent streamer` where the agent's offline model answers 10,000 words, i.e.
10,000 `text_delta` events. Reported: text deltas the runtime emitted, display messages sent
(new displays and updates: the live view must be throttled, not one update per delta), process
CPU time of the whole cell (all threads: process_time), and whether the final displayed text is
the answer verbatim. Then the same cell drawn as the chat widget: comm messages sent (at most ~30
a second), its kernel CPU against the text transcript's (target: within 1.5x), and whether the
text the browser last received is the answer verbatim. For comparison, the same answer through `Session.prompt` with no display
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
        json.dumps(data)  # what ipykernel's session does with it
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

# The same cell drawn as the chat widget: count the comm messages a kernel would send (each
# serialized as ipykernel's session would) and keep the last `history` the browser receives.
import comm
from comm.base_comm import BaseComm
text_deltas = counts["text_delta"]

class CountingComm(BaseComm):
    sent = 0
    history = None
    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        json.dumps(data, default=str)
        state = (data or {}).get("state") or {}
        if msg_type == "comm_msg":
            CountingComm.sent += 1
        if "history" in state:
            CountingComm.history = state["history"]

comm.create_comm = lambda *a, **kw: CountingComm(*a, **kw)
shell.run_line_magic("config", 'FlueMagics.widget = "always"')
answers[:] = ["warm up", text, "warm up", text]
cell()  # warm-up: anywidget, ipywidgets
pub.reset(); CountingComm.sent = 0; counts["text_delta"] = 0
cpu2, t2 = time.process_time(), time.perf_counter()
cell()
w_cpu, w_wall = time.process_time() - cpu2, time.perf_counter() - t2
drawn = "".join(p["text"] for p in (CountingComm.history or [{}])[-1].get("parts", []) if p["kind"] == "text")
widget = {"w_cpu_s": w_cpu, "w_wall_s": w_wall, "w_comm_msgs": CountingComm.sent,
          "w_displays": pub.new + pub.updates, "w_equal": drawn == text,
          "w_deltas": counts["text_delta"]}
counts["text_delta"] = text_deltas
shell.run_line_magic("config", 'FlueMagics.widget = "never"')

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
    **widget,
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
    ] + widget_rows(m)


def widget_rows(m: dict[str, Any], rate: float = 30.0) -> list[Result]:
    """The same answer drawn as the chat widget (`c.FlueMagics.widget = "always"`)."""
    label = f"chat widget, {m['w_deltas']:,} deltas " + (
        "(instant)" if not m["pace"] else f"(paced {m['pace'] * 1000:g} ms/delta)"
    )
    per_s = m["w_comm_msgs"] / m["w_wall_s"] if m["w_wall_s"] else 0.0
    bound = math.ceil(m["w_wall_s"] * rate) + 5
    ratio = m["w_cpu_s"] / m["cpu_s"] if m["cpu_s"] else float("inf")
    return [
        Result(
            label,
            "comm updates sent (+ display messages)",
            f"{m['w_comm_msgs']} ({per_s:.1f}/s) in {m['w_wall_s']:.2f} s (+ {m['w_displays']})",
            f"<= {bound} (30/s)",
            verdict(m["w_comm_msgs"] <= bound),
        ),
        Result(
            label,
            "kernel CPU: widget cell / text-transcript cell",
            f"{m['w_cpu_s'] * 1000:.0f} ms / {m['cpu_s'] * 1000:.0f} ms = {ratio:.2f}x",
            "<= 1.5x",
            verdict(ratio <= 1.5),
        ),
        Result(label, "widget's final text == streamed answer", str(m["w_equal"]), "True", verdict(m["w_equal"])),
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
