"""Benchmark: loop overhead of flue_nb (durable SQLite file store) vs pydantic-ai (in memory).

Both sides run the same 200-turn tool loop with an offline model: turns 1..199 ask for one
`read` of a 200-byte file, turn 200 answers. flue_nb runs through `Session.prompt` (admission,
the turn loop on the coordinator thread, every message recorded in a WAL SQLite file,
settlement); pydantic-ai runs `Agent.run_sync` with its `FunctionModel` and a plain `read` tool.
Reps are interleaved; the figure is the median ms/turn of each side and their ratio.

`--profile` also runs one flue_nb conversation under cProfile (enabled on the coordinator thread,
where the loop runs) and prints the top functions in ms per turn.

    .venv/bin/python bench/loop_vs_peer.py [--turns 200] [--reps 7] [--profile]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import cProfile
import io
import os
import pstats
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import PROMPT, SMALL, ReadLoop, Result, load_line, median, print_table, temp_dir, verdict

TURNS = 200


def _workdir() -> str:
    d = temp_dir("flue-bench-loop-")
    with open(os.path.join(d, "small.txt"), "w") as f:
        f.write(SMALL)
    return d


class FlueSide:
    """One agent + one durable file store; each `run()` is a fresh conversation of `turns` turns."""

    def __init__(self, workdir: str, turns: int, usage: bool = True) -> None:
        self.loop = ReadLoop(workdir, turns, usage=usage)
        self.turns = turns
        self.db = os.path.join(workdir, "bench.sqlite")
        self.n = 0

    @property
    def calls(self) -> int:
        """Model calls in the current conversation."""
        return self.loop.calls

    def session(self) -> Any:
        self.n += 1
        return self.loop.session(self.db, f"loop-{self.n}")

    def run(self) -> float:
        """Seconds for one whole conversation (session opened beforehand, outside the timing)."""
        s = self.session()
        self.store = s.store
        t0 = time.perf_counter()
        answer = s.prompt(PROMPT)
        elapsed = time.perf_counter() - t0
        assert answer == "done" and self.calls == self.turns, (answer, self.calls)
        return elapsed

    def profile(self, top: int = 25) -> str:
        """One conversation under cProfile on the coordinator thread; top functions in ms/turn."""
        from flue_nb.runtime.coordinator import coordinator

        s = self.session()
        co = coordinator()
        prof = cProfile.Profile()

        def on_loop(fn: Any) -> None:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            co.call(lambda: (fn(), done.set_result(None)))
            done.result(10)

        main_prof = cProfile.Profile()
        on_loop(prof.enable)
        main_prof.enable()
        t0 = time.perf_counter()
        s.prompt(PROMPT)
        wall = time.perf_counter() - t0
        main_prof.disable()
        on_loop(prof.disable)
        out = io.StringIO()
        per_turn = 1000.0 / self.turns
        out.write(
            f"flue_nb profile: one {self.turns}-turn conversation, {wall * 1000 / self.turns:.2f} "
            "ms/turn wall under cProfile (cProfile inflates Python-heavy code ~2x; read the "
            "shares, not the absolute figures; a coroutine's calls count each resumption)\n"
        )
        for title, key in (
            ("own time (tottime)", "tottime"),
            ("inclusive (cumtime)", "cumulative"),
        ):
            st = pstats.Stats(prof)
            st.sort_stats(key)
            out.write(f"\n  coordinator thread, top {top} by {title}, ms per turn:\n")
            out.write(f"  {'ms/turn':>8} {'calls/turn':>10}  function\n")
            for func in st.fcn_list[:top]:  # type: ignore[attr-defined]
                _cc, nc, tt, ct, _ = st.stats[func]  # type: ignore[attr-defined]
                ms = (tt if key == "tottime" else ct) * per_turn
                name = f"{_short(func[0])}:{func[1]}({func[2]})"
                out.write(f"  {ms:8.3f} {nc / self.turns:10.1f}  {name}\n")
        st = pstats.Stats(main_prof)
        st.sort_stats("tottime")
        out.write("\n  main thread (prompt: admit, wait), top 8 by own time, ms per turn:\n")
        for func in st.fcn_list[:8]:  # type: ignore[attr-defined]
            _cc, nc, tt, ct, _ = st.stats[func]  # type: ignore[attr-defined]
            out.write(f"  {tt * per_turn:8.3f} {nc / self.turns:10.1f}  {_short(func[0])}:{func[1]}({func[2]})\n")
        return out.getvalue()


def _short(path: str) -> str:
    for marker in ("site-packages/", "flue_nb/", "lib/python3"):
        i = path.find(marker)
        if i >= 0:
            return path[i + (len(marker) if marker == "site-packages/" else 0) :]
    return path


class PeerSide:
    """pydantic-ai `Agent` + `FunctionModel` with a `read` tool; messages stay in memory."""

    def __init__(self, workdir: str, turns: int, usage: bool = True) -> None:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.models.function import FunctionModel
        from pydantic_ai.usage import RequestUsage, UsageLimits

        self.turns = turns
        self.calls = 0

        def fn(messages: list[Any], info: Any) -> Any:
            self.calls += 1
            # Without usage, FunctionModel estimates it by walking the whole history each turn.
            u = RequestUsage(input_tokens=2_000 + 100 * self.calls, output_tokens=30) if usage else RequestUsage()
            if self.calls < turns:
                return ModelResponse(parts=[ToolCallPart("read", {"path": "small.txt"})], usage=u)
            return ModelResponse(parts=[TextPart("done")], usage=u)

        agent = Agent(FunctionModel(fn), system_prompt="You are helpful.")

        @agent.tool_plain
        def read(path: str) -> str:
            """Read a text file."""
            with open(os.path.join(workdir, path), encoding="utf-8") as f:
                return f.read()

        self.agent = agent
        self.limits = UsageLimits(request_limit=None)

    def run(self) -> float:
        self.calls = 0
        t0 = time.perf_counter()
        result = self.agent.run_sync(PROMPT, usage_limits=self.limits)
        elapsed = time.perf_counter() - t0
        assert result.output == "done" and self.calls == self.turns, (result.output, self.calls)
        return elapsed


def measure(turns: int = TURNS, reps: int = 7, profile: bool = False, usage: bool = True) -> dict[str, Any]:
    """Interleaved reps of both sides after one warm-up each; medians in ms/turn.

    `usage`: both models report token usage each turn, as real providers do (otherwise each
    side's fake estimates it: pydantic-ai's FunctionModel over the whole history every turn).
    """
    workdir = _workdir()
    flue_side = FlueSide(workdir, turns, usage)
    try:
        peer: PeerSide | None = PeerSide(workdir, turns, usage)
        peer_error = None
    except ImportError as exc:
        peer, peer_error = None, f"pydantic-ai not importable: {exc}"
    flue_side.run()  # warm-up: imports, tiktoken's encoding, the store's first pages
    if peer is not None:
        peer.run()
    flue_t, peer_t = [], []
    for _ in range(reps):
        flue_t.append(flue_side.run() * 1000 / turns)
        if peer is not None:
            peer_t.append(peer.run() * 1000 / turns)
    out: dict[str, Any] = {
        "turns": turns,
        "reps": reps,
        "usage": usage,
        "flue_ms_turn": median(flue_t),
        "flue_best": min(flue_t),
        "peer_ms_turn": median(peer_t) if peer_t else None,
        "peer_best": min(peer_t) if peer_t else None,
        "peer_error": peer_error,
        "store": f"{flue_side.store.journal_mode}, synchronous={flue_side.store.synchronous}",
    }
    if profile:
        out["profile"] = flue_side.profile()
    return out


def rows_for(m: dict[str, Any], *, target: bool) -> list[Result]:
    usage = "usage reported" if m["usage"] else "no usage: fakes estimate it"
    name = f"loop vs peer ({m['turns']} turns, {usage})"
    rows = [
        Result(
            name,
            f"flue_nb ms/turn (SQLite file: {m['store']})",
            f"{m['flue_ms_turn']:.2f} (best {m['flue_best']:.2f})",
            "",
            "info",
        ),
    ]
    if m["peer_ms_turn"] is None:
        rows.append(Result(name, "pydantic-ai ms/turn", m["peer_error"], "", "n/a"))
    else:
        ratio = m["flue_ms_turn"] / m["peer_ms_turn"]
        rows.append(
            Result(
                name,
                "pydantic-ai ms/turn (in memory)",
                f"{m['peer_ms_turn']:.2f} (best {m['peer_best']:.2f})",
                "",
                "info",
            )
        )
        rows.append(
            Result(
                name,
                "ratio flue_nb / pydantic-ai",
                f"{ratio:.2f}x",
                "<= 1.00x" if target else "",
                verdict(ratio <= 1.0) if target else "info",
            )
        )
    return rows


def run(quick: bool = False, profile: bool = True) -> tuple[list[Result], str]:
    """Rows for the table and the profile text."""
    m = measure(reps=3 if quick else 7, profile=profile)
    rows = rows_for(m, target=True)
    if not quick:
        rows += rows_for(measure(reps=5, usage=False), target=False)
    return rows, m.get("profile", "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=TURNS)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-usage", action="store_true", help="models report no usage")
    opts = ap.parse_args()
    m = measure(opts.turns, opts.reps, opts.profile, usage=not opts.no_usage)
    print(load_line())
    for k, v in m.items():
        if k != "profile":
            print(f"{k}: {v}")
    print_table(rows_for(m, target=True))
    if opts.profile:
        print(m["profile"])


if __name__ == "__main__":
    main()
