"""Benchmark: what `%flue serve` adds to an outside tool call (issue 24.6).

A real kernel runs `flue.serve()`; this process is the outside agent, the official `mcp` client
over streamable HTTP on loopback. Each round times, as the client sees them, a `python` call of
trivial code (`1`, whose own run time is microseconds) and one whose code sleeps 50 ms; the
overhead is the round trip minus the code's own run time (measured inside the kernel around the
same code). `tools/list` (the transport and the SDK alone, nothing recorded) is information.
Figures are medians. Target: a call's overhead at most 20 ms. An informational row times the same
trivial call once the conversation holds 300 calls (every call is a submission of it).

    .venv/bin/python bench/serve.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, median, print_table, temp_dir, verdict

TARGET_MS = 20.0
SLEEP_S = 0.05
GROWN, GROWN_QUICK = 300, 100
"""Calls recorded in the conversation before the last, informational, row is timed."""
TIMED = (
    "import time as _bt\n_bs = _bt.perf_counter()\n{code}\n_bench_own.append(_bt.perf_counter() - _bs)\ndel _bt, _bs"
)


async def _client(url: str, token: str, reps: int, grown: int = 0) -> dict[str, list[float]]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    out: dict[str, list[float]] = {"list": [], "trivial": [], "sleep": []}
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(url, http_client=http) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        await s.call_tool("python", {"code": "_bench_own = []"})  # warm: imports, first session
        for _ in range(reps):
            for key, code in (("trivial", "1"), ("sleep", f"time.sleep({SLEEP_S})")):
                started = time.perf_counter()
                result = await s.call_tool("python", {"code": TIMED.format(code=code)})
                out[key].append(time.perf_counter() - started)
                if result.is_error:
                    raise RuntimeError(f"the benchmark call failed: {result.content}")
            started = time.perf_counter()
            await s.list_tools()
            out["list"].append(time.perf_counter() - started)
        own = await s.call_tool("python", {"code": "print(repr(_bench_own))"})
        # The same call once the conversation holds `grown` calls: what a long session costs.
        out["grown"] = []
        for _ in range(max(0, grown - 2 * reps - 2)):
            await s.call_tool("python", {"code": "1"})
        for _ in range(10 if grown else 0):
            started = time.perf_counter()
            await s.call_tool("python", {"code": "1"})
            out["grown"].append(time.perf_counter() - started)
    text = own.content[0].text  # type: ignore[union-attr]
    own_times = eval(text[: text.index("]") + 1])  # noqa: S307 - our own list of floats
    out["own_trivial"], out["own_sleep"] = own_times[0::2], own_times[1::2]
    return out


def measure(reps: int, grown: int = 0) -> dict[str, list[float]]:
    """Client round trips (s) and the code's own run times (s) of `reps` rounds."""
    from cell_log import _BenchKernel

    cwd = temp_dir("flue-bench-serve-")
    env = {**os.environ, "FLUE_ALLOW_MODEL_REQUESTS": "0"}
    kernel = _BenchKernel(env, cwd)
    try:
        out = kernel.run(
            "import time, flue_nb as flue\nserved = flue.serve(db='bench.sqlite')\nprint(served.url, served.token)"
        )
        url, token = out.split()[-2:]
        return asyncio.run(_client(url, token, reps, grown))
    finally:
        kernel.close()


def rows_for(m: dict[str, list[float]]) -> list[Result]:
    rows = []
    for key, label in (("trivial", "python `1`"), ("sleep", f"python sleeping {SLEEP_S * 1000:g} ms")):
        trip, own = median(m[key]) * 1000, median(m[f"own_{key}"]) * 1000
        overhead = trip - own
        rows.append(
            Result(
                "serve (MCP call into a kernel)",
                f"{label}: round trip - own run time",
                f"{overhead:.1f} ms ({trip:.1f} - {own:.1f} ms)",
                f"<= {TARGET_MS:g} ms",
                verdict(overhead <= TARGET_MS),
            )
        )
    if m.get("grown"):
        rows.append(
            Result(
                "serve (MCP call into a kernel)",
                f"python `1` once the conversation holds {GROWN_QUICK if len(m['trivial']) < 30 else GROWN} calls",
                f"{median(m['grown']) * 1000:.1f} ms round trip",
                "",
                "info",
            )
        )
    rows.append(
        Result(
            "serve (MCP call into a kernel)",
            "tools/list round trip (transport alone)",
            f"{median(m['list']) * 1000:.1f} ms",
            "",
            "info",
        )
    )
    return rows


def run(quick: bool = False) -> list[Result]:
    return rows_for(measure(10, GROWN_QUICK) if quick else measure(30, GROWN))


def main() -> None:
    print(load_line())
    print_table(run())


if __name__ == "__main__":
    main()
