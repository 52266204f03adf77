"""What the browser test needs, got by the project's own files: Chromium, a browser venv, a Lab.

- Chromium: Debian's `chromium-headless-shell` package (`apt-get install`, only as root when it is
  missing).
- `.venv-browser/`: JupyterLab, Notebook 7, Playwright and the widget front ends, in a venv of
  their own so the main `.venv` never imports them (Playwright downloads no browser).
- A JupyterLab server on 127.0.0.1 with no token (or the one given), a temporary root and Jupyter dirs, whose
  kernel runs the main venv's Python (flue_nb, anywidget).

Anything that cannot be had raises `Unavailable` saying why; the test skips on it, except under
CI (`CI=true`), where it fails.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "notebook"))
sys.path.insert(0, str(ROOT / "tests"))
from kernel_helpers import KERNEL_NAME, _spec_manager, jupyter_env  # noqa: E402
from locks import apt_install  # noqa: E402
from venvs import Unavailable, venv_python  # noqa: E402

VENV = ROOT / ".venv-browser"
# rfc3987: with it jsonschema checks IRIs by regex and never imports rfc3987-syntax, which builds
# ~35 Lark parsers at import (jupyter_events -> jsonschema[format-nongpl] brings it; no Jupyter
# schema uses the IRI formats): a Jupyter server then starts in ~1.5 CPU-s instead of ~3, its
# `import jsonschema` 0.2 s instead of 2 (python-jsonschema/jsonschema#1428). A test-venv tool
# (GPL-3), never part of flue_nb.
FAST_JSONSCHEMA = "rfc3987"
PACKAGES = ["jupyterlab>=4", "notebook>=7", "playwright>=1.40", "anywidget>=0.9", "ipywidgets>=8", FAST_JSONSCHEMA]
# The live-document tests' server: the same plus real-time collaboration, in a venv of its own so
# the other browser tests keep a Lab without it.
LIVE_VENV = ROOT / ".venv-live"
LIVE_PACKAGES = [*PACKAGES, "jupyter-collaboration>=4"]
# jupyter-ai's browser test (test_jupyter_ai_browser.py): jupyter-ai 3.x and flue_nb from this checkout.
JUPYTER_AI_VENV = ROOT / ".venv-jupyter-ai"
JUPYTER_AI_PACKAGES = ["jupyter-ai>=3,<4", "playwright>=1.40", FAST_JSONSCHEMA, "-e", str(ROOT)]
# Debian's build of Chromium's headless shell: what Playwright itself runs for headless pages, and
# lighter than the full browser's headless mode (one browser test, one run each: Chromium's own
# CPU 19 s with the full browser, 14 s with the shell; the whole test 46 and 37 busy core-s).
CHROMIUM = "/usr/bin/chromium-headless-shell"
_PACKAGE = "chromium-headless-shell"


def chromium() -> str:
    """Debian's Chromium headless shell, installed with apt-get when missing and we are root."""
    why = apt_install([_PACKAGE], present=lambda: os.path.exists(CHROMIUM))
    if why is not None:
        raise Unavailable(why)
    return CHROMIUM


def browser_venv(venv: Path = VENV, packages: list[str] = PACKAGES) -> Path:
    """`venv`'s python (`.venv-browser` by default), created (and `packages` installed) when missing."""
    # jupyter-ai's venv (575 MB) serves one server and one driver a run: compiling it whole cost
    # more than their imports compile (tests/venvs.py).
    return venv_python(venv, packages, compile=venv != JUPYTER_AI_VENV)


def prerequisites(venv: Path = VENV, packages: list[str] = PACKAGES) -> tuple[str, Path]:
    """Chromium and the browser venv's python; the test skips saying why when they cannot be
    had, except under CI (`CI=true`), where it fails."""
    try:
        return chromium(), browser_venv(venv, packages)
    except Unavailable as exc:
        _unavailable("the browser test", "no real browser here", exc)


def chromium_prerequisite() -> str:
    """Chromium alone, for a test that opens a page without Playwright or Jupyter; skips or fails
    (under CI) as `prerequisites` does."""
    try:
        return chromium()
    except Unavailable as exc:
        _unavailable("the browser test", "no real browser here", exc)


def server_prerequisites(venv: Path = VENV, packages: list[str] = PACKAGES) -> Path:
    """The browser venv's python alone, for a test that talks to a real Jupyter server without a
    browser; skips or fails (under CI) as `prerequisites` does."""
    try:
        return browser_venv(venv, packages)
    except Unavailable as exc:
        _unavailable("the Jupyter server test", "no Jupyter server here", exc)


def _unavailable(test: str, here: str, exc: Unavailable) -> NoReturn:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{test} must run under CI, but: {exc}")
    pytest.skip(f"{here}: {exc}")


def write_notebook(path: Path, cells: list[str]) -> None:
    """A notebook of code cells (ids c0, c1, ...) whose kernel is this venv's test kernel."""
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
             "outputs": [], "source": src}
            for i, src in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"name": KERNEL_NAME, "display_name": "flue test", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    path.write_text(json.dumps(nb, indent=1))


def install_frontend(root: Path) -> dict[str, str]:
    """flue_nb's live-edit path for a Lab whose Jupyter dirs are under `root`, from the project's
    own files, as the wheel installs it: the labextension in the data dir's `labextensions/flue-nb`,
    the server extension switched on in the config dir; the server imports it from the checkout
    (the environment to add)."""
    ext = root / "data" / "labextensions" / "flue-nb"
    ext.parent.mkdir(parents=True, exist_ok=True)
    if not ext.exists():
        ext.symlink_to(ROOT / "flue_nb" / "notebook" / "document" / "labextension", target_is_directory=True)
    conf = root / "config" / "jupyter_server_config.d"
    conf.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "jupyter-config" / "jupyter_server_config.d" / "flue_nb.json", conf / "flue_nb.json")
    return {"PYTHONPATH": str(ROOT)}


def run_driver(
    python: Path, driver: str, tmp_path: Path, args: list[str], *, timeout: float = 900,
    before_stop: Callable[[], object] | None = None, env: dict[str, str] | None = None,
    frontend: bool = False, server_env: dict[str, str] | None = None,
) -> str:  # fmt: skip
    """Start a Lab on `tmp_path/nb` (kernel: this venv's Python; with `frontend`, flue_nb's
    live-edit extensions loaded; `server_env` added to the server's environment), run `driver` (a
    script beside this file, with `env` added to its environment) with `URL OUT CHROMIUM *args`, then `before_stop()` while the server still runs,
    and fail with the driver's report unless it passed."""
    _spec_manager(tmp_path)
    lab_env = jupyter_env(tmp_path)
    if frontend:
        lab_env.update(install_frontend(tmp_path))
    lab = Lab(python, tmp_path, {**lab_env, **(server_env or {})})
    try:
        done = subprocess.run([str(python), str(Path(__file__).with_name(driver)), lab.url, str(tmp_path), *args],
                              check=False, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})  # fmt: skip
        if before_stop is not None:
            before_stop()
    finally:
        lab.stop()
    report = done.stdout + done.stderr
    (tmp_path / "driver.log").write_text(report)
    assert done.returncode == 0, (
        f"browser steps failed (screenshots in {tmp_path}, log: driver.log):\n{report[:5000]}\n"
        f"--- lab.log:\n{(tmp_path / 'lab.log').read_text()[-3000:]}"
    )
    return report


# The server is on loopback: an HTTP(S)_PROXY in the environment must not route requests to it.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class JupyterServer:
    """A Jupyter server process (`argv` without a port) on a port the OS gave it, and its log.

    A port picked here and passed on could be taken meanwhile by a kernel another test worker
    starts (whose ZMQ socket then answered the readiness check); the server's own pick, read from
    its info file, leaves it no such window. Started once more if it still lost. A server that
    never answers `ready` (True once up; OSError or HTTPException while not yet) or answers garbage
    is stopped, its log closed, not leaked."""

    def __init__(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], log_path: Path,
        ready: Callable[[JupyterServer], bool],
    ) -> None:  # fmt: skip
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        try:
            self._start(argv, cwd, Path(env["JUPYTER_RUNTIME_DIR"]), env)
            self._wait(ready)
        except BaseException:
            self.stop()
            raise

    def _start(self, argv: list[str], cwd: Path, runtime: Path, env: dict[str, str]) -> None:
        for attempt in (1, 2):
            proc = subprocess.Popen([*argv, "--port=0", "--ServerApp.port_retries=0"], cwd=cwd, env=env,
                                    stdout=self._log, stderr=subprocess.STDOUT)  # fmt: skip
            self.proc = proc
            info = runtime / f"jpserver-{proc.pid}.json"
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    self.port = int(json.loads(info.read_text())["port"])
                    return
                except (OSError, ValueError, KeyError):  # not written yet, or half-written
                    time.sleep(0.1)
            self._end(proc)
            if attempt == 2 or time.monotonic() >= deadline:
                break
        raise RuntimeError(f"the Jupyter server did not start:\n{self.log_tail()}")

    def _wait(self, ready: Callable[[JupyterServer], bool]) -> None:
        deadline = time.monotonic() + 120
        while True:
            try:
                if ready(self):
                    return
            except (OSError, http.client.HTTPException):
                pass
            assert self.proc is not None
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Jupyter server did not answer:\n{self.log_tail()}")
            time.sleep(0.3)

    @property
    def url(self) -> str:
        """The server's root URL (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def request(self, path: str, *, token: str = "", method: str = "", body: object = None, timeout: float = 30) -> Any:
        """A request to the server's REST API (`path` under its root; `body` sent as JSON, a POST
        unless `method` says otherwise), with `token` if any; loopback, so no proxy."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.url}/{path}", data=data, method=method or ("GET" if body is None else "POST")
        )
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"token {token}")
        return _DIRECT.open(req, timeout=timeout)

    def log_tail(self) -> str:
        """The end of the server's log."""
        self._log.flush()
        return self.log_path.read_text()[-3000:]

    @staticmethod
    def _end(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def stop(self) -> None:
        """Shut the server (and its kernels) down and close its log."""
        if self.proc is not None:
            self._end(self.proc)
        self._log.close()


def _settings(settings: Path) -> None:
    """Lab user settings: no news or update checks, and every cell rendered (no windowing)."""
    files = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    }  # fmt: skip
    for name, value in files.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


def _quiet_server(config: Path) -> None:
    """What each page load would make the server do that no test looks at: the build check (it
    spawns `node` twice), the export formats of the File menu (every nbconvert exporter built,
    templates loaded) and the language-server probe. Measured on one Lab, three page loads:
    the server's CPU 5.8-6.6 s with them, 4.4-4.6 s without, and Chromium's ~0.3 s less a load."""
    files = {
        "labconfig/page_config.json": {
            "buildCheck": False, "buildAvailable": False,
            "disabledExtensions": {"@jupyterlab/notebook-extension:export": True},
        },
        "jupyter_server_config.d/flue-tests-quiet.json": {"ServerApp": {"jpserver_extensions": {"jupyter_lsp": False}}},
    }  # fmt: skip
    for name, value in files.items():
        path = config / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


class Lab:
    """A JupyterLab server for one test session."""

    def __init__(
        self, python: Path, root: Path, env: dict[str, str], *, token: str = "", hashed_password: str = ""
    ) -> None:
        self.root = root
        self.token = token
        """The server's token ("" for none: the browser tests open its pages without one)."""
        self.password = bool(hashed_password)
        """Whether it asks for a password (`jupyter_server.auth.passwd`'s hash given): then it
        answers nothing without a login or its token."""
        settings = root / "lab-settings"
        _settings(settings)
        _quiet_server(Path(env["JUPYTER_CONFIG_DIR"]))
        env = {**env, "JUPYTERLAB_SETTINGS_DIR": str(settings),
               "JUPYTERLAB_WORKSPACES_DIR": str(root / "lab-workspaces")}  # fmt: skip
        self.server = JupyterServer(
            [str(python), "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip", "127.0.0.1",
             f"--ServerApp.token={token}", f"--ServerApp.password={hashed_password}",
             f"--ServerApp.root_dir={root / 'nb'}", "--ServerApp.disable_check_xsrf=True",
             # `window.jupyterapp` in both frontends: a driver asks it whether the page has unsaved work
             "--LabApp.expose_app_in_browser=True", "--JupyterNotebookApp.expose_app_in_browser=True"],
            cwd=root / "nb", env=env, log_path=root / "lab.log", ready=self._answers,
        )  # fmt: skip

    @property
    def url(self) -> str:
        """The server's root URL."""
        return self.server.url

    def _answers(self, server: JupyterServer) -> bool:
        try:
            with server.request("api/status", token=self.token, timeout=2) as r:
                return bool(r.status == 200)
        except urllib.error.HTTPError as exc:
            # up, and refusing what has no login, as it should
            return exc.code == 403 and self.password and not self.token

    def open(self, path: str, *, body: object = None, timeout: float = 30) -> Any:
        """A request to the server's REST API (`path` under its root; a POST of `body` as JSON when
        given), with its token."""
        return self.server.request(path, token=self.token, body=body, timeout=timeout)

    def stop(self) -> None:
        """Shut the server (and its kernels) down."""
        self.server.stop()


def run_in_server_kernel(runtime: Path, code: str, *, only: bool = False) -> str:
    """Run `code` in a kernel of the server whose runtime dir is `runtime` (through its connection
    file; `only`: there must be exactly one); its stdout."""
    from jupyter_client import BlockingKernelClient

    found = sorted(runtime.glob("kernel-*.json"))
    if only:
        assert len(found) == 1, f"expected one kernel in {runtime}, found {[f.name for f in found]}"
    client = BlockingKernelClient(connection_file=str(found[0]))
    client.load_connection_file()
    client.start_channels()
    try:
        out: list[str] = []
        client.execute_interactive(code, timeout=60, output_hook=lambda m: out.append(m["content"].get("text", "")))
        return "".join(out)
    finally:
        client.stop_channels()
