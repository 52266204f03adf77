"""Benchmark: one huge MCP tool result, on stdio and on streamable HTTP (issue 20.9).

A hand-written server (bench/_mcp_raw_server.py, no SDK, so producing the answer costs next to
nothing) answers `big(megabytes=N)` with N MB of text. Each row times the call through
`use_mcp(...)` as the model's turn sees it (ToolStart to ToolEnd) and the stored result's size.
For comparison, the SDK's own `stdio_client` reads the same answer (its reader joins each 64 KB
read onto the whole pending line: quadratic; the figure is taken at sizes it finishes quickly).

The HTTP rows run the call in a fresh process each, answered as plain JSON (with a
Content-Length) and as an SSE event (counted as it is read), and show that process's peak RSS
growth during the call: a 50 MB answer used to be read whole (about 4-6 s and 50 MB+ held) and
only then cut.

Targets: a 30 MB stdio answer read in under 10 s; a 50 MB one (over the 32 MiB limit of one
message) refused with an error result in under 10 s, on stdio and on HTTP in both forms; a
stored result under 60 KB either way.

    .venv/bin/python bench/mcp_big_result.py [--quick]
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, maxrss_kib, print_table, python_json, reset_peak_rss, rss_kib, verdict

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_mcp_raw_server.py")
TARGET_S = 10.0
STORED_LIMIT = 60_000


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def through_flue(megabytes: float, url: str | None = None) -> tuple[float, int, bool, str]:
    """(seconds of the call, bytes of the stored result, is_error, first line) through use_mcp."""
    import flue_nb as flue
    from flue_nb.models import ScriptedModel, reply, tool_call
    from flue_nb.runtime import events as ev
    from flue_nb.runtime.messages import ToolResultMessage
    from flue_nb.runtime.tools.mcp import close_mcp_servers

    model = ScriptedModel([reply("", tool_call("mcp__raw__big", megabytes=megabytes)), reply("done")])

    @flue.agent
    def big_agent() -> str:
        flue.use_model(model)
        if url is None:
            flue.use_mcp("raw", command=[sys.executable, SERVER], call_timeout=600)
        else:
            flue.use_mcp("raw", url=url, call_timeout=600)
        return "bench"

    s = flue.init(big_agent, db=":memory:")
    seen: list[ev.Event] = []
    s.observe(seen.append)
    try:
        s.prompt("go")
    finally:
        close_mcp_servers()
    start = next(e for e in seen if isinstance(e, ev.ToolStart))
    end = next(e for e in seen if isinstance(e, ev.ToolEnd))
    [result] = [m for m in model.requests[1].messages if isinstance(m, ToolResultMessage)]
    return end.timestamp - start.timestamp, len(result.content.encode()), result.is_error, result.content[:120]


def http_child(megabytes: float, url: str) -> dict[str, object]:
    """`through_flue` over HTTP in this (fresh, then warmed) process, with its peak RSS growth during the call."""
    through_flue(0.01, url)  # warm: imports, first session, first connection
    reset_peak_rss()
    before = rss_kib() or 0
    took, stored, error, _ = through_flue(megabytes, url)
    return {"took": took, "stored": stored, "error": error, "peak_mb": (maxrss_kib() - before) / 1024}


def sdk_stdio(megabytes: float) -> float:
    """Seconds the SDK's own stdio_client takes to read the same answer (the comparison)."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def go() -> float:
        params = StdioServerParameters(command=sys.executable, args=[SERVER])
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            t = time.perf_counter()
            await s.call_tool("big", {"megabytes": megabytes})
            return time.perf_counter() - t

    return asyncio.run(go())


def run(quick: bool = False) -> list[Result]:
    rows = []
    sizes = [8.0, 30.0, 50.0] if not quick else [8.0, 50.0]
    for mb in sizes:
        took, stored, error, head = through_flue(mb)
        refused = mb * 1e6 > 32 * 1024 * 1024
        ok = took < TARGET_S and stored < STORED_LIMIT and error == refused
        what = "refused (error result)" if error else "read, cut to the limit"
        rows.append(
            Result(
                "MCP huge result (stdio)",
                f"{mb:g} MB answer",
                f"{took:.2f} s, {what}, stored {stored:,} B",
                f"< {TARGET_S:g} s, < {STORED_LIMIT // 1000} KB stored",
                verdict(ok),
            )
        )
    port = _free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)])
    try:
        time.sleep(0.5)
        for form in ("json", "sse"):
            for mb in sizes:
                url = f"http://127.0.0.1:{port}/mcp?form={form}"
                got = python_json(f"import mcp_big_result as m, _util; print(_util.dumps(m.http_child({mb}, {url!r})))")
                refused = mb * 1e6 > 32 * 1024 * 1024
                took, stored, error = float(got["took"]), int(got["stored"]), bool(got["error"])
                what = "refused (error result)" if error else "read, cut to the limit"
                rows.append(
                    Result(
                        f"MCP huge result (streamable HTTP, {'SSE' if form == 'sse' else 'JSON'})",
                        f"{mb:g} MB answer",
                        f"{took:.2f} s, {what}, peak +{float(got['peak_mb']):.0f} MB, stored {stored:,} B",
                        f"< {TARGET_S:g} s, < {STORED_LIMIT // 1000} KB stored",
                        verdict(took < TARGET_S and stored < STORED_LIMIT and error == refused),
                    )
                )
    finally:
        proc.kill()
        proc.wait(10)
    for mb in [2.0, 4.0] if quick else [2.0, 4.0, 8.0]:
        rows.append(
            Result(
                "MCP huge result: the SDK's stdio_client alone",
                f"{mb:g} MB answer",
                f"{sdk_stdio(mb):.2f} s",
                "",
                "info",
            )
        )
    return rows


def main() -> None:
    print(load_line())
    print_table(run("--quick" in sys.argv))


if __name__ == "__main__":
    main()
