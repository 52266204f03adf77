"""A real Jupyter server with real-time collaboration for the live-document tests.

The server runs from `.venv-live` (jupyter-server, jupyter-collaboration; built by
`tests/browser/_lab.py`, kept out of `.venv`'s imports) on 127.0.0.1 with a token, a temporary
root dir and temporary Jupyter dirs (its runtime dir is where the kernel finds it). Its kernels
run this venv's Python (flue_nb with the `live` extra). `session()` opens a notebook the way a
front end does (`POST /api/sessions`), so the kernel gets `JPY_SESSION_NAME`, a connection file in
the server's runtime dir and a session the sessions API knows; `attach()` talks to that kernel.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client import BlockingKernelClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _lab import LIVE_PACKAGES, LIVE_VENV, JupyterServer, Unavailable, browser_venv
from kernel_helpers import KERNEL_NAME, Kernel, _spec_manager, jupyter_env


def live_python() -> Path:
    """`.venv-live`'s python; skips saying why when it cannot be built (fails under CI=true)."""
    try:
        return browser_venv(LIVE_VENV, LIVE_PACKAGES)
    except Unavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the live-document tests must run under CI: {exc}")
        pytest.skip(f"no Jupyter server with collaboration: {exc}")


class LiveServer:
    """`jupyter server` with jupyter-collaboration, on loopback, for one test module."""

    def __init__(
        self, python: Path, root: Path, *, extra: tuple[str, ...] = (), env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.nb = root / "nb"
        self.nb.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(16)
        self.env = jupyter_env(root, **(env or {}))
        _spec_manager(root)  # the kernelspec running this venv's python, in the server's data dir
        self.log_path = root / "server.log"
        self._server = JupyterServer(
            [str(python), "-m", "jupyter_server", "--no-browser", "--allow-root", "--ip", "127.0.0.1",
             f"--ServerApp.token={self.token}", "--ServerApp.password=",
             f"--ServerApp.root_dir={self.nb}", *extra],
            cwd=self.nb, env=self.env, log_path=self.log_path, ready=self._answers,
        )  # fmt: skip
        assert self._server.proc is not None
        self.proc = self._server.proc
        self.url = self._server.url + "/"

    def _answers(self, server: JupyterServer) -> bool:
        server.request("api/status", token=self.token, timeout=2).close()
        return True

    def api(self, method: str, path: str, body: Any = None, *, timeout: float = 30) -> Any:
        """One authenticated JSON request to the server."""
        with self._server.request(path, token=self.token, method=method, body=body, timeout=timeout) as r:
            return json.loads(r.read() or b"null")

    def notebook(self, name: str, sources: list[str]) -> str:
        """Write a saved notebook with these code cells; returns its path relative to the root."""
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
        nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "flue test", "language": "python"}
        nbformat.write(nb, self.nb / name)
        return name

    def session(self, path: str) -> dict[str, Any]:
        """Open `path` with a new kernel of this server, as a front end does."""
        return dict(self.api("POST", "api/sessions", {"path": path, "name": path, "type": "notebook",
                                                      "kernel": {"name": KERNEL_NAME}}))  # fmt: skip

    def attach(self, kernel_id: str) -> Kernel:
        """A client of one of the server's kernels (through its connection file), once it is up."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return AttachedKernel(self.root / "runtime" / f"kernel-{kernel_id}.json")
            except RuntimeError:
                # A client not made by the kernel's manager reads a heartbeat that is not beating
                # yet as a dead kernel: a starting kernel, asked again.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets open and answers nothing."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Shut the server (and its kernels) down."""
        if self.proc.poll() is None:
            self.resume()
        self._server.stop()


class AttachedKernel(Kernel):
    """`Kernel`'s run/collect on a kernel someone else (the server) started."""

    def __init__(self, connection_file: Path) -> None:
        deadline = time.monotonic() + 60
        while not connection_file.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{connection_file} never appeared")
            time.sleep(0.1)
        kc = BlockingKernelClient(connection_file=str(connection_file))
        kc.load_connection_file()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
        except BaseException:
            kc.stop_channels()
            raise
        self.kc = kc
        self.shown = {}

    def shutdown(self) -> None:
        """Stop listening (the server owns the kernel)."""
        self.kc.stop_channels()
