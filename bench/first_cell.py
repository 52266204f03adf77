"""Benchmark: how long the first `%%flue` cell of a fresh kernel takes to reach the model.

A loopback Messages API (tests/anthropic_server.py) stands in for Anthropic. A fresh kernel of
this venv is started (it loads `flue_nb` by itself, as an installed environment does) with
`FLUE_MODEL=anthropic/claude-sonnet-4-6` and `ANTHROPIC_BASE_URL` pointing at the server. As soon
as the kernel is ready, this process sends the `execute_request` of a `%%flue` cell and measures
the time until the first byte of the model request arrives at the server; then a second cell
likewise. Both clocks are this process's, so nothing depends on the kernel's clock.

Two ways to send the first cell: `typed`, THINK_S seconds after the kernel is ready (a person
opening a notebook and running a cell; what the extension loads in the background at start-up is
done by then), and `at once`, the moment the kernel is ready (Restart & Run All; the worst case:
the SDK is still importing on the warm-up thread, so the request goes out over plain httpx2 and
the cell shares the interpreter with that import).
`FLUE_WARMUP=0` in the environment measures the kernel without the background loading.

    .venv/bin/python bench/first_cell.py [--kernels 5]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import REPO, Result, load_line, median, print_table, verdict

sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "notebook"))
from anthropic_server import AnthropicServer, stream, text  # noqa: E402
from kernel_helpers import Kernel  # noqa: E402

THINK_S = 3.0
FIRST_TARGET_MS = 500
LATER_TARGET_MS = 30
CELL = "%%flue\nSay hello."


class _ArrivalServer(AnthropicServer):
    """The loopback server, noting when the first byte of each request arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[float] = []
        self.arrived = threading.Condition()
        base = self._httpd.RequestHandlerClass
        outer = self

        class Timed(base):  # type: ignore[misc, valid-type]
            def handle_one_request(self) -> None:
                try:
                    # Wait for the request's first byte without consuming it.
                    got = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    got = b""
                if got:
                    with outer.arrived:
                        outer.arrivals.append(time.perf_counter())
                        outer.arrived.notify_all()
                super().handle_one_request()

        self._httpd.RequestHandlerClass = Timed

    def wait_arrival(self, n: int, timeout: float) -> float:
        """The perf_counter time of the `n`-th request's first byte (1-based)."""
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.arrivals) >= n, timeout):
                raise TimeoutError(f"request {n} did not arrive in {timeout} s")
            return self.arrivals[n - 1]


def one_kernel(server: _ArrivalServer, root: Path, think: float) -> tuple[float, float]:
    """(first cell ms, second cell ms) in one fresh kernel, the first sent `think` s after ready."""
    cwd = root / "work"
    cwd.mkdir(parents=True)
    seen = len(server.arrivals)
    server.enqueue(stream(text("Hello.")), stream(text("Hello again.")))
    kernel = Kernel(
        root / "jupyter",
        cwd,
        FLUE_MODEL="anthropic/claude-sonnet-4-6",
        ANTHROPIC_API_KEY="bench-key",
        ANTHROPIC_BASE_URL=server.url,
    )
    try:
        time.sleep(think)
        figures = []
        for n in (1, 2):
            t0 = time.perf_counter()
            msg_id = kernel.send(CELL)
            arrived = server.wait_arrival(seen + n, timeout=120)
            figures.append((arrived - t0) * 1000)
            run = kernel.collect(msg_id, timeout=120)
            if run.status != "ok" or "Hello" not in run.all_text():
                raise RuntimeError(f"cell {n} did not complete:\n{run.all_text()}")
        return figures[0], figures[1]
    finally:
        kernel.shutdown()


def measure(kernels: int) -> dict[str, Any]:
    out: dict[str, Any] = {"typed": ([], []), "at once": ([], [])}
    with _ArrivalServer() as server:
        for _ in range(kernels):
            for mode, think in (("typed", THINK_S), ("at once", 0.0)):
                with tempfile.TemporaryDirectory(prefix="flue-bench-first-") as tmp:
                    first, second = one_kernel(server, Path(tmp), think)
                out[mode][0].append(first)
                out[mode][1].append(second)
    return out


def _spread(xs: list[float]) -> str:
    return f"{median(xs):.0f} ms (min {min(xs):.0f}, max {max(xs):.0f})"


def rows_for(m: dict[str, Any]) -> list[Result]:
    n = len(m["typed"][0])
    typed_first, at_once_first = median(m["typed"][0]), median(m["at once"][0])
    later = m["typed"][1] + m["at once"][1]
    return [
        Result(
            "first cell",
            f"fresh kernel, first %%flue typed {THINK_S:.0f} s after ready -> model request (median of {n})",
            _spread(m["typed"][0]),
            f"<= {FIRST_TARGET_MS} ms",
            verdict(typed_first <= FIRST_TARGET_MS),
        ),
        Result(
            "first cell",
            "fresh kernel, first %%flue sent the moment it is ready (Run All)",
            _spread(m["at once"][0]),
            f"<= {FIRST_TARGET_MS} ms",
            verdict(at_once_first <= FIRST_TARGET_MS),
        ),
        Result(
            "first cell",
            f"the second %%flue cell -> model request (median of {len(later)})",
            f"{median(later):.1f} ms (min {min(later):.1f}, max {max(later):.1f})",
            f"<= {LATER_TARGET_MS} ms",
            verdict(median(later) <= LATER_TARGET_MS),
        ),
    ]


def run(quick: bool = False) -> list[Result]:
    return rows_for(measure(3 if quick else 5))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", type=int, default=5)
    opts = ap.parse_args()
    m = measure(opts.kernels)
    print(load_line())
    for mode, (first, second) in m.items():
        print(
            f"{mode}: first",
            " ".join(f"{x:.0f}" for x in first),
            "ms; second",
            " ".join(f"{x:.1f}" for x in second),
            "ms",
        )
    print_table(rows_for(m))


if __name__ == "__main__":
    main()
