"""Benchmark: what a conversation of 100, 1,000 and 10,000 submissions costs (issue 37).

One SQLite file holds a conversation of each size, built once per run by direct store writes
from one real submission's records (the model asks for one small `read`, then answers), with a
compaction every 50 submissions as a long conversation has them. Then, on each conversation:

- a turn: `Session.prompt` (a read and an answer), median of 15 after a first one;
- `status()`: median of 40 calls after a first one;
- opening a chat: `%flue chat` in an in-process IPython shell, from the magic to the widget's
  synced state (the static copy under it included), median of three, wall clock and the
  process's CPU time (the machine is shared: the CPU time is what the open itself costs);
- opening a chat in a new process (a fresh kernel's first `%flue chat`, after the extension's
  warm-up; its imports included): once on the store as built (no tally kept: what the first
  open after upgrading from a version that kept none pays, once), then, median of three, with
  the tally that first open kept, and its growth per 10x (target 1.2x);
- history: `%flue history` and `flue-nb history CONVERSATION`, as printed by default, median of 15;

and the growth of each per 10x. The turn, `status()`, history and a new process's first open are
measured round by round across the sizes, so a change in the machine's load falls on all alike;
in SQLite their growth is that of the process's CPU time per call (the wall clock is printed too),
on PostgreSQL (whose server is another process) that of the wall clock. Targets: a turn and `status()` grow at most 1.2x per 10x,
opening a chat takes at most 0.2 s at 1,000 and at 10,000 submissions, history is bounded by
default (at most 1.2x per 10x). The chat's redraw from the store (what a follower does when
another kernel changes the conversation) is timed at 200 and 1,000 submissions (target 0.2 s).
With a PostgreSQL server at hand (tests/pg.py), the turn and `status()` rows again on it.

    .venv/bin/python bench/scale.py [--quick] [--sizes 100,1000,10000] [--no-postgres] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import SMALL, Result, load_line, median, print_table, temp_dir, verdict

SIZES = (100, 1000, 10000)
REDRAW_SIZES = (200, 1000)
COMPACT_EVERY = 50
GROWTH_TARGET = 1.2
OPEN_TARGET_S = 0.2
REDRAW_TARGET_S = 0.2
PROMPT = "Read small.txt and say done."
_SLOW = 3.0
"""A first sample slower than this many seconds is the only one taken (the code before the fix)."""


# -- a conversation of n submissions, written straight to the store ------------------------------


def _agent(workdir: str) -> Any:
    """The benchmark's agent: each submission asks for one `read` of small.txt, then answers."""
    import flue_nb as flue
    from flue_nb.models import FunctionModel, reply, tool_call
    from flue_nb.runtime.messages import ToolResultMessage

    with open(os.path.join(workdir, "small.txt"), "w") as f:
        f.write(SMALL)

    def fn(request: Any) -> Any:
        if request.messages and isinstance(request.messages[-1], ToolResultMessage):
            return reply("done", usage=(2_000, 10))
        return reply("", tool_call("read", path="small.txt"), usage=(2_000, 30))

    model = FunctionModel(fn, id="claude-sonnet-4-6")
    model.requests = _NoList()  # type: ignore[assignment]  # a 10,000-turn run keeps no requests

    @flue.agent(name="scale_agent")
    def scale_agent() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.local(workdir))
        return "You are benchmarked."

    return scale_agent


class _NoList(list):  # type: ignore[type-arg]
    def append(self, item: Any) -> None:
        pass


class Template:
    """One real submission's records, to be written again under other ids."""

    def __init__(self, db: str, workdir: str, agent: Any) -> None:
        import flue_nb as flue

        s = flue.init(agent, db=db, cwd=workdir, conversation="scale-template")
        assert s.prompt(PROMPT) == "done"
        [sub] = s.submissions()
        records = s.store.records("scale-template")
        self.system = next(r.data for r in records if r.kind == "system")
        self.items = [
            (r.kind, r.data) for r in records if r.submission_id == sub.id and r.kind not in ("settlement", "system")
        ]
        calls = [d["call_id"] for k, d in self.items if k == "message" and d.get("kind") == "tool_result"]
        self.sid, self.call = sub.id, calls[0]
        self.text = json.dumps(self.items)
        self.settings = sub.settings

    def items_for(self, sid: str, call: str) -> list[tuple[Any, dict[str, Any]]]:
        """The template's records with its submission and call ids replaced."""
        return [tuple(x) for x in json.loads(self.text.replace(self.sid, sid).replace(self.call, call))]  # type: ignore[misc]


def build(store: Any, cid: str, n: int, tpl: Template, *, t0: float = 1_700_000_000.0) -> float:
    """Write a conversation of `n` settled submissions to `store`; seconds it took."""
    from flue_nb.runtime.store import Outcome, SubmissionState, SubmissionUpdate

    started = time.perf_counter()
    store.ensure_conversation(cid, now=t0)
    store.append(cid, None, [("system", tpl.system)], now=t0)
    for i in range(n):
        sid, t = f"sub_{cid}_{i:06d}", t0 + 1 + i
        store.admit(cid, PROMPT, submission_id=sid, now=t, settings=tpl.settings)
        running = SubmissionUpdate(sid, fields={"state": SubmissionState.RUNNING, "attempts": 1, "started_at": t})
        recs = store.append(cid, sid, tpl.items_for(sid, f"call_{cid}_{i}"), now=t + 0.1, updates=[running])
        store.settle(sid, Outcome.COMPLETED, result="done", now=t + 0.2)
        if (i + 1) % COMPACT_EVERY == 0 and i + 1 < n:
            first = next(r.seq for r in recs if r.kind == "message")
            data = {
                "summary": f"Read small.txt {i + 1} times.",
                "first_kept_seq": first,
                "reason": "threshold",
                "messages_before": 4 * COMPACT_EVERY,
                "messages_after": 5,
                "tokens_before": 150_000,
                "tokens_after": 2_000,
                "duration_ms": 1.0,
            }
            store.append(cid, None, [("compaction", data), ("system", tpl.system)], now=t + 0.3)
    return time.perf_counter() - started


# -- measuring -----------------------------------------------------------------------------------


def _interleaved(fns: dict[int, Callable[[], Any]], reps: int, cpu: dict[int, float] | None = None) -> dict[int, float]:
    """Median seconds of each size's `fn`, measured round by round across the sizes (one call of
    each per round), so a change in the shared machine's load falls on every size alike rather
    than on whichever size was measured last. With `cpu`, each size's median CPU seconds of this
    process per call go into it (what the call costs, whatever else the machine runs)."""
    times: dict[int, list[float]] = {n: [] for n in fns}
    used: dict[int, list[float]] = {n: [] for n in fns}
    for _ in range(reps):
        for n, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[n].append(time.perf_counter() - t0)
            used[n].append(time.process_time() - c0)
    if cpu is not None:
        cpu.update({n: median(u) for n, u in used.items()})
    return {n: median(t) for n, t in times.items()}


def _samples(fn: Callable[[], Any], reps: int, cpu: list[float] | None = None) -> float:
    """Median seconds of `fn` over `reps` calls; one call only when the first is very slow.
    With `cpu`, the median of the process's CPU seconds per call is appended to it."""
    out, used = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        out.append(time.perf_counter() - t0)
        used.append(time.process_time() - c0)
        if out[0] > _SLOW:
            break
    if cpu is not None:
        cpu.append(median(used))
    return median(out)


def _first_open(db: str, cid: str, workdir: str) -> tuple[float, float]:
    """Wall and CPU seconds of the first `%flue chat` of a new process (`--first-open`)."""
    argv = [sys.executable, os.path.abspath(__file__), "--first-open", db, cid, workdir]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the new process failed: {proc.stderr[-500:]}")
    wall, cpu = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(wall), float(cpu)


def _first_open_here(db: str, cid: str, workdir: str) -> None:
    """In a new process: open the chat once and print [wall, cpu] seconds as JSON."""
    agent = _agent(workdir)
    with _shell(db, agent) as sh:
        t0, c0 = time.perf_counter(), time.process_time()
        _open_chat(sh, cid)
        print(json.dumps([time.perf_counter() - t0, time.process_time() - c0]))


@contextlib.contextmanager
def _shell(db: str, agent: Any) -> Iterator[Any]:
    """An in-process IPython shell with the extension loaded and the agent in its namespace."""
    # Imported first, as in a kernel: importing it swaps comm's manager, and the extension's
    # warm-up thread importing it mid-measurement left a widget's comm in the old one (KeyError
    # when the widget closed, in about half the runs).
    import ipykernel.ipkernel  # noqa: F401
    from IPython.core.interactiveshell import InteractiveShell

    from flue_nb.notebook.magics import _warm

    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "flue_nb")
    for thread in _warm._started:  # its imports are not what opening a chat costs
        thread.join(120)
    sh.user_ns["scale_agent"] = agent
    sh.run_line_magic("config", f"FlueMagics.db = {db!r}")
    try:
        yield sh
    finally:
        InteractiveShell.clear_instance()


def _quiet(fn: Callable[[], Any]) -> Callable[[], Any]:
    def go() -> Any:
        with contextlib.redirect_stdout(io.StringIO()):
            return fn()

    return go


def _open_chat(sh: Any, cid: str) -> dict[str, Any]:
    """`%flue chat` once: the widget's synced state's size and the static copy's, then closed."""
    from flue_nb.notebook.views.chat.widget import open_widgets

    before = set(map(id, open_widgets()))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sh.run_line_magic("flue", f"chat -a scale_agent -c {cid}")
    [w] = [w for w in open_widgets() if id(w) not in before]
    state = len(json.dumps({"history": w.history, "live": w.live, "status": w.status}))
    blocks = len(w.history) + len(w.live)
    w.close()
    return {"state_bytes": state, "blocks": blocks, "copy_bytes": len(out.getvalue())}


def measure(sizes: tuple[int, ...] = SIZES, *, postgres: bool = True, profile: bool = False) -> dict[str, Any]:
    """Every figure of the row, by size."""
    import flue_nb as flue
    from flue_nb import cli
    from flue_nb.notebook.views.chat.widget import ChatWidget
    from flue_nb.runtime.store.sqlite import open_store

    workdir = temp_dir("flue-bench-scale-")
    db = os.path.join(workdir, "scale.sqlite")
    agent = _agent(workdir)
    tpl = Template(db, workdir, agent)
    store = open_store(db, cwd=workdir)
    out: dict[str, Any] = {"sizes": sizes, "build_s": {}, "turn": {}, "status": {}, "open": {}, "chat": {}}
    out.update({"history": {}, "cli": {}, "redraw": {}, "pg_turn": {}, "pg_status": {}, "profiles": []})
    out.update({"open_cpu": {}, "first_untallied": {}, "first": {}})
    out.update({"turn_cpu": {}, "status_cpu": {}, "history_cpu": {}, "cli_cpu": {}})
    redraw_sizes = tuple(n for n in REDRAW_SIZES if n <= max(sizes))
    for n in sorted({*sizes, *redraw_sizes}):
        out["build_s"][n] = build(store, f"scale-{n}", n, tpl)
    store.close()
    for n in sizes:
        # Written straight to the store, the conversations have no tally kept yet: as a store
        # an older flue_nb wrote. This first open folds every record once, and keeps the tally.
        out["first_untallied"][n] = _first_open(db, f"scale-{n}", workdir)
    prof = cProfile.Profile() if profile else None
    with _shell(db, agent) as sh:
        sessions = {n: flue.init(agent, db=db, cwd=workdir, conversation=f"scale-{n}") for n in sizes}
        for s in sessions.values():
            s.prompt(PROMPT)  # the first turn reads the window from the store
            s.status()
        turns = {n: (lambda s=s: s.prompt(PROMPT)) for n, s in sessions.items()}
        out["turn"] = _interleaved(turns, 15, out["turn_cpu"])
        out["status"] = _interleaved({n: s.status for n, s in sessions.items()}, 40, out["status_cpu"])
        history = {
            n: _quiet(lambda cid=f"scale-{n}": sh.run_line_magic("flue", f"history -a scale_agent -c {cid}"))
            for n in sizes
        }
        out["history"] = _interleaved(history, 15, out["history_cpu"])
        cli_history = {n: (lambda cid=f"scale-{n}": cli.history(db, cid)) for n in sizes}
        out["cli"] = _interleaved(cli_history, 15, out["cli_cpu"])
        for n in sizes:
            cid = f"scale-{n}"
            if prof is not None and n == max(sizes):
                prof.enable()
                sessions[n].prompt(PROMPT)
                sessions[n].status()
                history[n]()
            chats: list[dict[str, Any]] = []
            cpu: list[float] = []
            out["open"][n] = _samples(lambda cid=cid, chats=chats: chats.append(_open_chat(sh, cid)), 3, cpu)
            out["open_cpu"][n] = cpu[0]
            out["chat"][n] = chats[-1]
            if prof is not None and n == max(sizes):
                prof.disable()
        for n in redraw_sizes:
            s = flue.init(agent, db=db, cwd=workdir, conversation=f"scale-{n}")
            w = ChatWidget(s, follow=False)
            out["redraw"][n] = _samples(w.redraw_from_store, 3)
            w.close()
    runs: dict[int, list[tuple[float, float]]] = {n: [] for n in sizes}
    for _ in range(3):  # round by round across the sizes, as `_interleaved`
        for n in sizes:
            runs[n].append(_first_open(db, f"scale-{n}", workdir))
    for n in sizes:
        out["first"][n] = (median([w for w, _ in runs[n]]), median([c for _, c in runs[n]]))
    if postgres:
        out["pg_error"] = _postgres(sizes, tpl, agent, workdir, out)
    if prof is not None:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
        out["profiles"].append(text.getvalue())
    return out


def _postgres(sizes: tuple[int, ...], tpl: Template, agent: Any, workdir: str, out: dict[str, Any]) -> str:
    """The turn and `status()` on PostgreSQL; why not, when no server can be had."""
    from store import postgres_url

    import flue_nb as flue
    from flue_nb.runtime.store.url import open_any

    try:
        with postgres_url() as url:
            store = open_any(url, cwd=workdir)
            for n in sizes:
                build(store, f"scale-{n}", n, tpl)
            sessions = {n: flue.init(agent, db=store, cwd=workdir, conversation=f"scale-{n}") for n in sizes}
            for s in sessions.values():
                s.prompt(PROMPT)
                s.status()
            out["pg_turn"] = _interleaved({n: (lambda s=s: s.prompt(PROMPT)) for n, s in sessions.items()}, 15)
            out["pg_status"] = _interleaved({n: s.status for n, s in sessions.items()}, 40)
            store.close()
    except RuntimeError as exc:
        return str(exc)[:80]
    return ""


# -- the table -----------------------------------------------------------------------------------


def _growth_rows(
    name: str, by_size: dict[int, float], unit: str, *, target: float | None, cpu: dict[int, float] | None = None
) -> list[Result]:
    """The values at each size and the growth per 10x; with `cpu` (an in-process call's CPU time),
    the growth is the CPU time's: on a shared machine the wall clock measures the load too."""
    sizes = sorted(by_size)
    fmt = (lambda v: f"{v * 1000:.2f} ms") if unit == "ms" else (lambda v: f"{v:.3f} s")
    values = " / ".join(fmt(by_size[n]) for n in sizes)
    rows = [Result("scale", f"{name} at {' / '.join(f'{n:,}' for n in sizes)}", values, "", "info")]
    grown = by_size
    if cpu:
        rows.append(Result("scale", "  its CPU time", " / ".join(fmt(cpu[n]) for n in sizes), "", "info"))
        grown = cpu
    for a, b in zip(sizes, sizes[1:]):
        g = grown[b] / max(grown[a], 1e-9)
        rows.append(
            Result(
                "scale",
                f"{name}: growth {a:,} -> {b:,}{' (CPU time)' if cpu else ''}",
                f"{g:.2f}x",
                f"<= {target}x" if target else "",
                verdict(g <= target) if target else "info",
            )
        )
    return rows


def rows_for(m: dict[str, Any]) -> list[Result]:
    """The table's rows."""
    rows = [
        Result(
            "scale",
            "built (direct store writes)",
            ", ".join(f"{n:,}: {s:.1f} s" for n, s in m["build_s"].items()),
            "",
            "info",
        )
    ]
    rows += _growth_rows("a turn (read + answer)", m["turn"], "ms", target=GROWTH_TARGET, cpu=m["turn_cpu"])
    rows += _growth_rows("status()", m["status"], "ms", target=GROWTH_TARGET, cpu=m["status_cpu"])
    rows += _growth_rows("opening %flue chat", m["open"], "s", target=None)
    for n in m["sizes"]:
        if n >= 1000:
            rows.append(
                Result(
                    "scale",
                    f"opening %flue chat at {n:,} (CPU {m['open_cpu'][n]:.3f} s)",
                    f"{m['open'][n]:.3f} s",
                    f"<= {OPEN_TARGET_S} s",
                    verdict(m["open"][n] <= OPEN_TARGET_S),
                )
            )
    # A new process's first open also imports the widget's libraries (ipywidgets, anywidget,
    # markdown-it: a few tenths of a second whatever the conversation): its growth is the figure.
    first = {n: wall for n, (wall, _) in m["first"].items()}
    first_cpu = {n: cpu for n, (_, cpu) in m["first"].items()}
    rows += _growth_rows(
        "first %flue chat of a new process (imports included)", first, "s", target=GROWTH_TARGET, cpu=first_cpu
    )
    rows.append(
        Result(
            "scale",
            "the same, no tally kept yet (once per conversation after upgrading)",
            " / ".join(f"{n:,}: {m['first_untallied'][n][0]:.3f} s" for n in m["sizes"]),
            "",
            "info",
        )
    )
    for n, c in m["chat"].items():
        rows.append(
            Result(
                "scale",
                f"chat at {n:,}: blocks drawn, synced state, static copy",
                f"{c['blocks']:,}, {c['state_bytes'] / 1024:,.0f} KiB, {c['copy_bytes'] / 1024:,.0f} KiB",
                "",
                "info",
            )
        )
    rows += _growth_rows("%flue history", m["history"], "ms", target=GROWTH_TARGET, cpu=m["history_cpu"])
    rows += _growth_rows("flue-nb history", m["cli"], "ms", target=GROWTH_TARGET, cpu=m["cli_cpu"])
    for n, v in m["redraw"].items():
        rows.append(
            Result(
                "scale",
                f"chat redraw from the store at {n:,}",
                f"{v:.3f} s",
                f"<= {REDRAW_TARGET_S} s",
                verdict(v <= REDRAW_TARGET_S),
            )
        )
    if m.get("pg_error"):
        rows.append(Result("scale (postgres)", "not measured", m["pg_error"], "", "n/a"))
    elif m["pg_turn"]:
        rows += [
            Result(f"{r.benchmark} (postgres)", *list(vars(r).values())[1:])
            for r in _growth_rows("a turn", m["pg_turn"], "ms", target=GROWTH_TARGET)
        ]
        rows += [
            Result(f"{r.benchmark} (postgres)", *list(vars(r).values())[1:])
            for r in _growth_rows("status()", m["pg_status"], "ms", target=GROWTH_TARGET)
        ]
    return rows


def run(quick: bool = False) -> list[Result]:
    return rows_for(measure((100, 1000) if quick else SIZES, postgres=not quick))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 and 1,000 submissions, no PostgreSQL")
    ap.add_argument("--sizes", default="", help="comma-separated sizes (default 100,1000,10000)")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--profile", action="store_true", help="profile the largest size's measurements")
    ap.add_argument("--first-open", nargs=3, metavar=("DB", "CONVERSATION", "DIR"), help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.first_open:
        _first_open_here(*opts.first_open)
        return
    sizes = tuple(int(x) for x in opts.sizes.split(",")) if opts.sizes else ((100, 1000) if opts.quick else SIZES)
    m = measure(sizes, postgres=not (opts.quick or opts.no_postgres), profile=opts.profile)
    for p in m["profiles"]:
        print(p)
    print(load_line())
    print_table(rows_for(m))


if __name__ == "__main__":
    main()
