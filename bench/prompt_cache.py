"""Benchmark: the share of input tokens read from Anthropic's prompt cache in a realistic session.

A loopback Messages API (`_cache_server.py`) applies Anthropic's documented cache rules to every
request it receives and reports reads and writes in `usage` as the API does. Through the real
Anthropic provider, flue_nb runs a 100-call data-analysis session: 50 messages, each a `read` of
one of ten CSV files of mixed sizes (200 B to 20 KB) and an answer; a tool mounted at message 15
and another unmounted at message 25 (signals); `session.compact()` after message 30; a subagent
(`task`) at message 35; and at message 45 the process is killed (SIGKILL) while its request is in
flight, and a new process opens the store, recovers that submission and goes on to message 50 (a
kernel restart). Each phase runs in its own process against the same server.

The same 50 messages go through pydantic-ai's Anthropic model against a fresh server, with its
default settings and with its caching settings on (`anthropic_cache_instructions`,
`anthropic_cache_tool_definitions`, `anthropic_cache`); it has no subagent, compaction or crash.

Per session: the share of prompt tokens read from cache, the limit (the share a cache could read
at best: each request's longest prefix shared with an earlier request), cache writes, and the
list-price cost at claude-sonnet-4-6's prices (flue_nb's table, `PRICES_AS_OF`).

    .venv/bin/python bench/prompt_cache.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cache_server import CacheServer, Served
from _util import Result, print_table, temp_dir, verdict

MODEL = "claude-sonnet-4-6"
MESSAGES = 50
SIZES = (200, 2_000, 8_000, 20_000, 500, 4_000, 12_000, 1_000, 16_000, 6_000)
SYSTEM = "You are a careful data analyst. Read the file the user names and say what is in it."
CRASH_AT = 45


def _files(workdir: str) -> None:
    for i, size in enumerate(SIZES):
        row = f"{i},region_{i % 4},{i * 37 % 101},{i * 13 % 7}\n"
        with open(os.path.join(workdir, f"data_{i:02d}.csv"), "w") as f:
            f.write("id,region,units,score\n" + row * max(1, size // len(row)))


def message(k: int) -> str:
    """The k-th user message of the session."""
    if k == 35:
        return "Ask the checker to check data_03.csv for gaps."
    return f"Look at file {k % len(SIZES):02d} and tell me what is in it (step {k})."


_ids = iter(range(1, 10**9))


def brain(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The model's side: read the named file, delegate when asked, answer after a tool result."""
    if not body.get("tools"):
        sections = ("Goal", "Constraints", "Progress", "Key decisions", "Next steps", "Critical context")
        return [{"type": "text", "text": "\n".join(f"## {s}\nThe user reads CSV files one by one." for s in sections)}]
    last = body["messages"][-1]
    content = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
    if any(b.get("type") == "tool_result" for b in content):
        return [{"type": "text", "text": "The file holds ids, regions, units and scores; nothing is missing."}]
    text = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    names = {t["name"] for t in body["tools"]}
    if "checker" in text and "task" in names:
        call = {"agent": "checker", "prompt": "Check data_03.csv for gaps.", "description": "check data_03.csv"}
        return [{"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": "task", "input": call}]
    digits = [w for w in text.replace(".", " ").split() if w.isdigit() and len(w) == 2]
    path = f"data_{digits[0] if digits else '03'}.csv"
    return [{"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": "read", "input": {"path": path}}]


# --- flue_nb, one phase per process ---------------------------------------------------------------


def _flue_agent(url: str, workdir: str, flags: dict[str, bool]) -> Any:
    import flue_nb as flue
    from flue_nb.models import AnthropicModel

    @flue.tool
    def lookup(code: str) -> str:
        """Look a region code up."""
        return f"region {code}"

    @flue.tool
    def notes() -> str:
        """The analyst's notes."""
        return "none"

    model = AnthropicModel(MODEL, api_key="bench", base_url=url)

    @flue.agent
    def checker() -> str:
        flue.use_model(model)
        return "You check CSV files for gaps and say what you found."

    @flue.agent(max_turns=400)
    def analyst() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.local(workdir))
        flue.use_subagent(flue.define_subagent("checker", "Checks a CSV file for gaps", agent=checker))
        if flags.get("lookup"):
            flue.use_tool(lookup)
        if flags.get("notes", True):
            flue.use_tool(notes)
        return SYSTEM

    return analyst


def _flags(k: int) -> dict[str, bool]:
    return {"lookup": k >= 15, "notes": k < 25}


def child(phase: str, url: str, workdir: str, db: str) -> None:
    """One process of the flue_nb session: `first` (0..44), `crash` (45, killed), `after` (recover, 46..49)."""
    import flue_nb as flue

    flags: dict[str, bool] = {}
    session = flue.init(_flue_agent(url, workdir, flags), conversation="analysis", db=db, cwd=workdir)
    if phase == "first":
        for k in range(CRASH_AT):
            flags.update(_flags(k))
            session.prompt(message(k), timeout=120)
            if k == 30:
                session.compact()
    elif phase == "crash":
        flags.update(_flags(CRASH_AT))
        session.prompt(message(CRASH_AT), timeout=600)
    else:
        flags.update(_flags(CRASH_AT))
        crashed = [s for s in session.submissions() if s.outcome is None]
        for s in crashed:
            session.read(s.id, timeout=120)
        for k in range(CRASH_AT + 1, MESSAGES):
            flags.update(_flags(k))
            session.prompt(message(k), timeout=120)


def run_flue(workdir: str) -> tuple[list[Served], int]:
    """The whole flue_nb session through three processes: the server's accounting of it, and the
    index of the request the killed process left unanswered."""
    server = CacheServer(brain)
    db = os.path.join(workdir, "flue.sqlite")
    me = os.path.abspath(__file__)

    def phase(name: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, me, "--child", name, server.url, workdir, db])

    try:
        if phase("first").wait(timeout=900) != 0:
            raise RuntimeError("the first phase of the flue_nb session failed")
        crashed_at = len(server.served)
        marker = f"(step {CRASH_AT})"

        def crash_here(body: dict[str, Any]) -> bool:
            last = body["messages"][-1]
            blocks = last["content"] if isinstance(last["content"], list) else []
            return any(marker in b.get("text", "") for b in blocks) and not server.held.is_set()

        server.hold = crash_here
        proc = phase("crash")
        if not server.held.wait(300):
            proc.kill()
            raise RuntimeError("the crash phase never reached the model")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        server.hold = lambda body: False
        if phase("after").wait(timeout=900) != 0:
            raise RuntimeError("the recovering phase of the flue_nb session failed")
        return list(server.served), crashed_at
    finally:
        server.close()


def _events(served: list[Served], crashed_at: int) -> list[Result]:
    """What the compaction and the recovery cost the cache."""
    name = "prompt cache: flue_nb"
    rows = []
    summary = next(i for i, s in enumerate(served) if s.tools == 0)
    after = served[summary + 1 : summary + 3]
    rows.append(
        Result(
            name,
            "after the compaction: writes, then reads",
            f"{after[0].written:,} of {after[0].prompt:,} written; next reads {after[1].read / after[1].prompt:.0%}",
            "one write",
            verdict(after[0].written > 0 and after[1].written < after[0].written and after[1].read > 0),
        )
    )
    crashed, recovered = served[crashed_at], served[crashed_at + 1]
    rows.append(
        Result(
            name,
            "recovered request reads the crashed one's prefix",
            f"{recovered.read:,} of {recovered.prompt:,} read (crashed attempt wrote {crashed.written:,})",
            "read",
            verdict(recovered.read >= crashed.read + crashed.written - 1 and recovered.prompt == crashed.prompt),
        )
    )
    return rows


# --- pydantic-ai ----------------------------------------------------------------------------------


def run_pydantic_ai(workdir: str, caching: bool) -> list[Served]:
    """The same 50 messages through pydantic-ai's Anthropic model; the server's accounting."""
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
    from pydantic_ai.providers.anthropic import AnthropicProvider

    server = CacheServer(brain)
    try:
        settings = (
            AnthropicModelSettings(
                anthropic_cache_instructions=True, anthropic_cache_tool_definitions=True, anthropic_cache=True
            )
            if caching
            else None
        )
        model = AnthropicModel(MODEL, provider=AnthropicProvider(api_key="bench", base_url=server.url))
        agent = Agent(model, system_prompt=SYSTEM, model_settings=settings)

        @agent.tool_plain
        def read(path: str) -> str:
            """Read a file of the working directory."""
            with open(os.path.join(workdir, path)) as f:
                return f.read()

        history: list[Any] = []
        for k in range(MESSAGES):
            result = agent.run_sync(message(k), message_history=history)
            history = result.all_messages()
        return list(server.served)
    finally:
        server.close()


# --- figures --------------------------------------------------------------------------------------


def _figures(served: list[Served]) -> dict[str, float]:
    from flue_nb.runtime.messages import Usage
    from flue_nb.runtime.providers import price_of

    price = price_of(MODEL)
    assert price is not None
    prompt = sum(s.prompt for s in served)
    cost = sum(price.cost(Usage(s.uncached, 0, s.read, s.written)) for s in served)
    return {
        "requests": len(served),
        "prompt": prompt,
        "share": sum(s.read for s in served) / prompt,
        "limit": sum(s.limit for s in served) / prompt,
        "written": sum(s.written for s in served),
        "cost": cost,
    }


def _rows(name: str, f: dict[str, float], *, target: bool) -> list[Result]:
    gap = (f["limit"] - f["share"]) * 100
    rows = [
        Result(name, "requests / prompt tokens", f"{f['requests']:.0f} / {f['prompt']:,.0f}", "", "info"),
        Result(name, "read from cache (limit)", f"{f['share']:.1%} ({f['limit']:.1%})", "", "info"),
        Result(name, "cache writes", f"{f['written']:,.0f} tokens", "", "info"),
        Result(name, "list-price input cost", f"${f['cost']:.4f}", "", "info"),
    ]
    if target:
        rows.append(Result(name, "points below the limit", f"{gap:.1f}", "<= 2", verdict(gap <= 2.0)))
        rows.append(Result(name, "read from cache", f"{f['share']:.1%}", ">= 90 %", verdict(f["share"] >= 0.9)))
    return rows


def run(quick: bool) -> list[Result]:
    """The benchmark's rows (one session each; `quick` changes nothing: the session is the measure)."""
    workdir = temp_dir("flue-bench-cache-")
    _files(workdir)
    served, crashed_at = run_flue(workdir)
    rows = _rows("prompt cache: flue_nb", _figures(served), target=True) + _events(served, crashed_at)
    for caching in (False, True):
        label = "pydantic-ai " + ("caching on" if caching else "defaults")
        try:
            rows += _rows(f"prompt cache: {label}", _figures(run_pydantic_ai(workdir, caching)), target=False)
        except ImportError as exc:
            rows.append(Result(f"prompt cache: {label}", "error", f"pydantic-ai not installed: {exc}", "", "n/a"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", nargs=4, metavar=("PHASE", "URL", "WORKDIR", "DB"))
    ap.add_argument("--json", action="store_true", help="print the flue_nb figures as JSON")
    opts = ap.parse_args()
    if opts.child:
        child(*opts.child)
        return
    rows = run(False)
    if opts.json:
        print(json.dumps([r.__dict__ for r in rows]))
    else:
        print_table(rows)


if __name__ == "__main__":
    main()
