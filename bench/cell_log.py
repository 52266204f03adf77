"""Benchmark: what the cell log costs the user's own cells (issue 21.1).

An in-process IPython shell runs the same cells with the log installed and without, alternating
in rounds so the machine's noise falls on both sides: a trivial cell (`x = 1`), and a cell that
prints a large output (10 MB in 100 KB lines) to a sink that discards it: the worst case, where
printing itself costs nothing, reported as information. Then a real kernel prints the same 10 MB
to its front end (this process, reading every message), timed inside the cell up to the final
`flush()`, with the log and without: the figure the target is about. Figures are medians per
cell; the overhead is the difference, also as a share of the cell's own time. Targets: under
100 us and under 2 % on a trivial cell; the large print no slower (within 2 %).

    .venv/bin/python bench/cell_log.py
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, median, print_table, temp_dir, verdict

TRIVIAL_US = 100.0
SHARE = 0.02


class _Sink:
    """A stdout that throws text away (the terminal's cost is not the log's)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _shell():  # type: ignore[no-untyped-def]
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.history_manager.enabled = False
    return shell


def _time_cell(shell, code: str, reps: int) -> list[float]:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        shell.run_cell(code, store_history=True)
        samples.append(time.perf_counter() - t0)
    return samples


def measure(rounds: int, trivial_reps: int, big_reps: int) -> dict[str, tuple[float, float]]:
    """case -> (median seconds without the log, with it)."""
    from flue_nb.notebook.cells.log import install, uninstall

    shell = _shell()
    big = "line = 'y' * 99_999\nfor _ in range(100):\n    print(line)"
    cases = {"trivial": ("x = 1", trivial_reps), "large print (10 MB)": (big, big_reps)}
    samples: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in cases}
    real = sys.stdout
    sys.stdout = _Sink()  # type: ignore[assignment]
    try:
        for _ in range(rounds):
            for name, (code, reps) in cases.items():
                off, on = samples[name]
                off.extend(_time_cell(shell, code, reps))
                install(shell)
                on.extend(_time_cell(shell, code, reps))
                uninstall(shell)
    finally:
        sys.stdout = real
    return {name: (median(off), median(on)) for name, (off, on) in samples.items()}


KERNEL_CELL = """
import sys, time
_t = time.perf_counter()
for _ in range(100):
    print(_line)
sys.stdout.flush()
_times.append(time.perf_counter() - _t)
"""


def measure_kernel(rounds: int, reps: int) -> tuple[float, float]:
    """(median s without the log, with it) of a 10 MB print in a real kernel, timed in the cell."""
    import json
    import queue

    from jupyter_client.manager import KernelManager

    root = temp_dir("flue-bench-celllog-")
    env = {k: v for k, v in os.environ.items() if k not in ("JPY_SESSION_NAME", "ANTHROPIC_API_KEY")}
    for var in ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        env[var] = os.path.join(root, var.lower())
        os.makedirs(env[var], exist_ok=True)
    km = KernelManager(kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    km.start_kernel(env=env, cwd=root)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)

        def run(code: str) -> str:
            msg_id = kc.execute(code)
            out = ""
            while True:
                try:
                    msg = kc.get_iopub_msg(timeout=120)
                except queue.Empty as exc:
                    raise TimeoutError("the benchmark kernel stopped answering") from exc
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                    out += msg["content"]["text"][-200:]
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    return out

        run("from flue_nb.notebook.cells.log import install, uninstall\n_line = 'y' * 99_999\n_times = []")
        samples: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(rounds):
            for mode in ("off", "on"):
                run("uninstall(get_ipython())" if mode == "off" else "install(get_ipython())")
                run("_times.clear()")
                for _ in range(reps):
                    run(KERNEL_CELL)
                samples[mode] += json.loads(run("import json; print(json.dumps(_times))").strip().splitlines()[-1])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return median(samples["off"]), median(samples["on"])


def rows_for(m: dict[str, tuple[float, float]]) -> list[Result]:
    rows = []
    off, on = m["trivial"]
    extra_us = (on - off) * 1e6
    share = (on - off) / off
    rows.append(
        Result("cell log", "trivial cell: without / with", f"{off * 1e6:.0f} us / {on * 1e6:.0f} us", "", "info")
    )
    rows.append(
        Result(
            "cell log",
            "trivial cell: overhead",
            f"{extra_us:.1f} us",
            f"<= {TRIVIAL_US:g} us",
            verdict(extra_us <= TRIVIAL_US),
        )
    )
    rows.append(
        Result(
            "cell log",
            "trivial cell: overhead share",
            f"{share * 100:.1f} %",
            f"<= {SHARE * 100:g} %",
            verdict(share <= SHARE),
        )
    )
    off, on = m["large print (10 MB)"]
    rows.append(
        Result(
            "cell log",
            "10 MB print to a discarding sink: with / without",
            f"{on / off:.2f}x ({on * 1000:.1f} vs {off * 1000:.1f} ms)",
            "",
            "info",
        )
    )
    if "kernel" in m:
        off, on = m["kernel"]
        ratio = on / off
        rows.append(
            Result(
                "cell log",
                "10 MB print in a real kernel: with / without",
                f"{ratio:.3f}x ({on * 1000:.1f} vs {off * 1000:.1f} ms)",
                f"<= {1 + SHARE:g}x",
                verdict(ratio <= 1 + SHARE),
            )
        )
    return rows


def run(quick: bool = False) -> list[Result]:
    m = measure(3 if quick else 7, 200 if quick else 500, 3 if quick else 5)
    m["kernel"] = measure_kernel(2 if quick else 3, 3 if quick else 5)
    return rows_for(m)


def main() -> None:
    print(load_line())
    print_table(run())


if __name__ == "__main__":
    main()
