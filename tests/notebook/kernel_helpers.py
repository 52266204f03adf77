"""Real IPython kernels for tests: isolated Jupyter dirs, the venv's python, output collection.

`Kernel.run(code)` executes a cell and returns what a front end would have seen: stream text,
displays (with `update_display_data` applied by display id, as JupyterLab does), the error, and
how many updates each display got.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

KERNEL_NAME = "flue-test"


def jupyter_env(root: Path, **extra: str) -> dict[str, str]:
    """An environment whose Jupyter and IPython dirs live under `root` (nothing in $HOME)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "FLUE_MODEL", "JPY_SESSION_NAME")}
    for var, sub in (
        ("IPYTHONDIR", "ipython"),
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
    ):
        path = root / sub
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    env["FLUE_ALLOW_MODEL_REQUESTS"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def _spec_manager(root: Path, python: str = sys.executable) -> KernelSpecManager:
    """A kernelspec running `python` (this venv's), registered in the temporary data dir."""
    kdir = root / "data" / "kernels" / KERNEL_NAME
    kdir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "flue test",
        "language": "python",
        "interrupt_mode": "signal",
    }
    (kdir / "kernel.json").write_text(json.dumps(spec))
    return KernelSpecManager(kernel_dirs=[str(root / "data" / "kernels")])


@dataclass
class Run:
    """What one executed cell produced."""

    status: str
    stdout: str = ""
    stderr: str = ""
    displays: dict[str, dict[str, Any]] = field(default_factory=dict)
    """display id (or a generated key) -> the latest `{"data", "metadata"}`."""
    updates: dict[str, int] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)

    def text(self, mime: str = "text/plain") -> str:
        """Every display's final `mime` text, in order."""
        return "\n".join(d["data"].get(mime, "") for d in self.displays.values())

    @property
    def error_text(self) -> str:
        """The error output as a front end would print it."""
        if self.error is None:
            return ""
        return "\n".join(self.error.get("traceback") or [f"{self.error.get('ename')}: {self.error.get('evalue')}"])

    def all_text(self) -> str:
        """Stdout, stderr, displays and the error, for assertions and failure messages."""
        return "\n".join([self.stdout, self.stderr, self.text(), self.error_text])


def chat_helpers(*, tries: int) -> str:
    """Kernel-side source of `tool_cards(node)`, every tool card in a chat widget's JSON, and
    `wait_for(test, what)`, which asks `test` every 0.05 s, `tries` times at most, and fails
    with the open chat widget `w`'s history and live blocks."""
    return f"""\
def tool_cards(node):
    if isinstance(node, dict):
        found = [node] if node.get("kind") == "tool" else []
        return found + [c for v in node.values() for c in tool_cards(v)]
    if isinstance(node, list):
        return [c for v in node for c in tool_cards(v)]
    return []
def wait_for(test, what):
    for _ in range({tries}):
        found = test()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"never {{what}}: {{w.history}} {{w.live}}")
"""


class Kernel:
    """One real kernel started from the venv with isolated dirs, in `cwd`."""

    def __init__(
        self,
        root: Path,
        cwd: Path,
        *,
        python: str = sys.executable,
        kernel_name: str | None = None,
        **env: str,
    ) -> None:
        """`kernel_name`: a kernelspec installed in `root`'s data dir, instead of the plain one."""
        self.root = root
        self.env = jupyter_env(root, **env)
        for attempt in (1, 2):
            if kernel_name is None:
                self.km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=_spec_manager(root, python))
            else:
                specs = KernelSpecManager(kernel_dirs=[str(root / "data" / "kernels")])
                self.km = KernelManager(kernel_name=kernel_name, kernel_spec_manager=specs)
            self.km.connection_file = str(root / "runtime" / f"kernel-{uuid.uuid4().hex[:8]}.json")
            self.km.start_kernel(env=self.env, cwd=str(cwd))
            try:
                self.kc = self._client()
                break
            except RuntimeError as exc:
                # jupyter_client picks the kernel's TCP ports by binding and releasing them: a
                # kernel another test worker starts at that moment can take one, and this one
                # dies at start (seen once in a parallel run). A kernel dying for a reason of
                # its own dies again.
                if attempt == 2 or "died" not in str(exc):
                    raise
                print(f"kernel_helpers: the kernel died at start ({exc}); starting it once more", file=sys.stderr)
                self.km.shutdown_kernel(now=True)
        self.shown: dict[str, dict[str, Any]] = {}
        """display id -> the data it shows now: every display and update of it applied in the
        order they arrived, whichever cell they came with (as a frontend does)."""

    def _client(self) -> Any:
        kc = self.km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
        except BaseException:
            kc.stop_channels()
            raise
        return kc

    def send(self, code: str) -> str:
        """Start executing a cell; returns its msg id (collect with `collect`)."""
        return self.kc.execute(code, allow_stdin=False)

    def collect(self, msg_id: str, timeout: float = 60.0, until: Any = None) -> Run:
        """Gather the cell's output until it is idle (or `until(run)` is true)."""
        run = Run(status="running")
        deadline = time.monotonic() + timeout
        n = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"cell did not finish in {timeout} s; so far:\n{run.all_text()}")
            try:
                msg = self.kc.get_iopub_msg(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if msg["msg_type"] in ("display_data", "update_display_data"):
                # A background run's update may come with a cell that already finished (sent
                # between cells): only arrival order says which is the latest.
                did = (msg["content"].get("transient") or {}).get("display_id")
                if did:
                    self.shown[did] = msg["content"]["data"]
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            run.messages.append(msg)
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    run.stdout += content["text"]
                else:
                    run.stderr += content["text"]
            elif kind in ("display_data", "execute_result", "update_display_data"):
                did = (content.get("transient") or {}).get("display_id") or f"_out{n}"
                n += 1
                if kind == "update_display_data":
                    run.updates[did] = run.updates.get(did, 0) + 1
                run.displays[did] = {
                    "data": content["data"],
                    "metadata": content.get("metadata", {}),
                }
            elif kind == "error":
                run.error = content
            elif kind == "status" and content["execution_state"] == "idle":
                run.status = "error" if run.error else "ok"
                return run
            if until is not None and until(run):
                return run

    def run(self, code: str, timeout: float = 60.0) -> Run:
        """Execute a cell and wait for it."""
        return self.collect(self.send(code), timeout)

    def ok(self, code: str, timeout: float = 60.0) -> Run:
        """Execute a cell that must not fail."""
        run = self.run(code, timeout)
        assert run.status == "ok", run.all_text()
        return run

    def interrupt(self) -> None:
        """SIGINT, like the stop button."""
        self.km.interrupt_kernel()

    def restart(self) -> None:
        """Kill the kernel at once (SIGKILL, as a crash would) and start a new one, same cwd/env.

        `restart_kernel(now=True)` alone sends SIGINT before the kill; a kernel quick enough to
        handle it aborts the run durably (the stop button's path, tested elsewhere), which is a
        different scenario from the one a restart test means: the kernel dying mid-run.
        """
        self.kc.stop_channels()
        self.km.provisioner.process.kill()
        self.km.provisioner.process.wait(10)
        self.km.restart_kernel(now=True)
        self.kc = self._client()

    def shutdown(self) -> None:
        """Stop the kernel and its channels."""
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
