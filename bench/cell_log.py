"""Benchmark: what the cell log costs the user's own cells (issue 21.1).

An in-process IPython shell runs the same cells with the log installed and without, alternating
in rounds so the machine's noise falls on both sides: a trivial cell (`x = 1`), and a cell that
prints a large output (10 MB in 100 KB lines) to a sink that discards it: the worst case, where
printing itself costs nothing, reported as information. Then a real kernel prints the same 10 MB
to its front end (this process, reading every message), timed inside the cell up to the final
`flush()`, with the log and without: the figure the target is about. Figures are medians per
cell; the overhead is the difference. Targets: under 100 us per trivial cell (in-process, where
nothing else hides it), under 2 % of a trivial cell's round trip in a real kernel (execute
request to idle, as a front end sees it; the in-process share is information), and the large
print in a real kernel no slower (within 2 %).

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
    from flue_nb.notebook.celllog.log import install, uninstall

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


class _BenchKernel:
    """A kernel of this venv, run cell by cell from here (every message read, as a front end would)."""

    def __init__(self, env: dict[str, str], cwd: str) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
        self.km.start_kernel(env=env, cwd=cwd)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str) -> str:
        """Execute a cell; the tail of its stdout once the kernel is idle again."""
        import queue

        msg_id = self.kc.execute(code)
        out = ""
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=120)
            except queue.Empty as exc:
                raise TimeoutError("the benchmark kernel stopped answering") from exc
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                text = msg["content"]["text"]
                out += text if len(text) < 10_000 else ""  # the 10 MB prints are read, not kept
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return out

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def measure_kernel(rounds: int, reps: int, trivial_reps: int) -> dict[str, tuple[float, float]]:
    """(median s without the log, with it) of a 10 MB print in a real kernel, timed in the cell,
    and of a trivial cell's round trip as the front end sees it (execute request to idle)."""
    import json

    root = temp_dir("flue-bench-celllog-")
    env = {k: v for k, v in os.environ.items() if k not in ("JPY_SESSION_NAME", "ANTHROPIC_API_KEY")}
    for var in ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        env[var] = os.path.join(root, var.lower())
        os.makedirs(env[var], exist_ok=True)
    # One kernel, the log switched off and on between timed cells (the order alternating each
    # round): two kernels, one with and one without, differed by up to 10 % between runs for
    # reasons of their own (two processes), more than the 2 % the target is about.
    kernel = _BenchKernel(env, root)
    switch = {"off": "uninstall(get_ipython())", "on": "install(get_ipython())"}
    try:
        kernel.run(
            "from flue_nb.notebook.celllog.log import install, uninstall\n_line = 'y' * 99_999\n"
            "_times = {'off': [], 'on': []}"
        )
        trips: dict[str, list[float]] = {"off": [], "on": []}
        for i in range(trivial_reps):
            for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
                kernel.run(switch[mode])
                t0 = time.perf_counter()
                kernel.run("x = 1")
                trips[mode].append(time.perf_counter() - t0)
        for i in range(rounds * reps):
            for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
                kernel.run(switch[mode])
                kernel.run(KERNEL_CELL.replace("_times.append", f"_times[{mode!r}].append"))
        samples = json.loads(kernel.run("import json; print(json.dumps(_times))").strip().splitlines()[-1])
    finally:
        kernel.close()
    return {
        "kernel": (median(samples["off"]), median(samples["on"])),
        "kernel trivial": (median(trips["off"]), median(trips["on"])),
    }


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
    # IPython's in-process run_cell is the cheapest a cell can be: the share of that is information;
    # the 2 % target is judged on a real kernel's cell below.
    rows.append(Result("cell log", "trivial cell: share of an in-process run_cell", f"{share * 100:.1f} %", "", "info"))
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
    if "kernel trivial" in m:
        off, on = m["kernel trivial"]
        share = (on - off) / off
        rows.append(
            Result(
                "cell log",
                "trivial cell in a real kernel (round trip): with / without",
                f"{on * 1e3:.2f} ms / {off * 1e3:.2f} ms ({share * 100:+.1f} %)",
                f"<= {SHARE * 100:g} %",
                verdict(share <= SHARE),
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
    m.update(measure_kernel(2 if quick else 10, 3 if quick else 5, 50 if quick else 200))
    return rows_for(m)


def main() -> None:
    print(load_line())
    print_table(run())


if __name__ == "__main__":
    main()
