"""Benchmark: what the sandbox adds to one `bash` call (issue 36.6; target: under 20 ms).

The `bash` tool (through `execute_tool`, as the loop calls it) runs `true` on three sandboxes in
one temporary workspace, interleaved call by call so the machine's load falls on all alike:
`sandbox="none"` (bash as the user), `"bwrap"` (bubblewrap: fresh namespaces, the masks, no
network), and `"bwrap"` with `allow_hosts` (the same, plus the loopback forwarder started inside
before the command). The figure is the median sandboxed call minus the median plain call, wall
clock; the least of each is shown too (the machine is shared: medians move with the load).

    .venv/bin/python bench/sandbox_cost.py [--calls 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, median, print_table, verdict

TARGET_MS = 20.0
CALLS = 60


async def _measure(calls: int) -> dict[str, list[float]]:
    from flue_nb.runtime.sandbox.local import LocalSandbox
    from flue_nb.runtime.tools import bash_tool
    from flue_nb.runtime.tools.tool import ToolContext, execute_tool

    work = tempfile.mkdtemp(prefix="flue-bench-sandbox-")
    boxes = {
        "none": LocalSandbox(work),
        "bwrap": LocalSandbox(work, sandbox="bwrap"),
        "bwrap + allow_hosts": LocalSandbox(work, sandbox="bwrap", allow_hosts=["127.0.0.1"]),
    }
    tools = {name: bash_tool(box) for name, box in boxes.items()}
    times: dict[str, list[float]] = {name: [] for name in boxes}
    for i in range(calls + 2):
        order = list(boxes) if i % 2 == 0 else list(reversed(boxes))
        for name in order:
            ctx = ToolContext(call_id=f"c{i}", sandbox=boxes[name])
            start = time.perf_counter()
            out = await execute_tool(tools[name], {"command": "true"}, ctx)
            took = (time.perf_counter() - start) * 1000
            if out.is_error:
                raise RuntimeError(f"bash `true` failed under {name}: {out.content[:300]}")
            if i >= 2:  # the first two rounds warm the page cache, the bwrap probe and the proxy
                times[name].append(took)
    return times


def rows_for(times: dict[str, list[float]]) -> list[Result]:
    plain = median(times["none"])
    rows = [
        Result(
            "sandbox cost per bash call",
            f"{name}: median (least) of {len(ts)} `true` calls",
            f"{median(ts):.1f} ms ({min(ts):.1f} ms)",
            "",
            "info",
        )
        for name, ts in times.items()
    ]
    added = median(times["bwrap"]) - plain
    rows.append(
        Result(
            "sandbox cost per bash call",
            "bwrap minus none (medians)",
            f"{added:+.1f} ms",
            f"< {TARGET_MS:.0f} ms",
            verdict(added < TARGET_MS),
        )
    )
    proxied = median(times["bwrap + allow_hosts"]) - plain
    rows.append(
        Result(
            "sandbox cost per bash call",
            "bwrap + allow_hosts minus none (medians; the forwarder's Python start)",
            f"{proxied:+.1f} ms",
            "",
            "info",
        )
    )
    return rows


def _unavailable() -> str | None:
    from flue_nb.runtime.sandbox.contain import Containment

    return Containment("bwrap").refusal()


def run(quick: bool = False) -> list[Result]:
    why = _unavailable()
    if why is not None:
        return [Result("sandbox cost per bash call", "bwrap", f"not measured: {why[:100]}", "", "n/a")]
    return rows_for(asyncio.run(_measure(20 if quick else CALLS)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=CALLS)
    opts = ap.parse_args()
    print(load_line())
    why = _unavailable()
    if why is not None:
        sys.exit(why)
    print_table(rows_for(asyncio.run(_measure(opts.calls))))


if __name__ == "__main__":
    main()
