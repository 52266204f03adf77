"""Finding the Jupyter server and notebook of a kernel: runtime-dir files, JupyterHub, bounded requests.

No Jupyter server here (test_live_document.py has the real one): the "servers" are files in a
temporary runtime dir and loopback sockets that refuse, or accept and never answer.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flue_nb.notebook.document import live
from flue_nb.notebook.document.servers import Unavailable, find, kernel_id, notebook_kernel, servers


def _announce(runtime: Path, *, pid: int, url: str, token: str = "t0k") -> None:
    runtime.mkdir(parents=True, exist_ok=True)
    info = {"url": url, "token": token, "pid": pid, "root_dir": str(runtime)}
    (runtime / f"jpserver-{pid}.json").write_text(json.dumps(info))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _env(runtime: Path, **extra: str) -> dict[str, str]:
    return {"JUPYTER_RUNTIME_DIR": str(runtime), **extra}


def test_kernel_id_is_the_connection_file_stem():
    assert kernel_id("/run/jupyter/kernel-4f1c-77.json") == "4f1c-77"


def test_outside_a_kernel_there_is_no_live_document(monkeypatch):
    # pytest is no kernel: no connection file, so connect() answers None at once and says why.
    started = time.monotonic()
    assert live.connect(timeout=2) is None
    assert time.monotonic() - started < 2
    assert "not a Jupyter kernel" in (live.reason() or "")


def test_servers_skip_dead_pids_and_take_live_ones(tmp_path, monkeypatch):
    runtime = tmp_path / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    _announce(runtime, pid=_dead_pid(), url="http://127.0.0.1:1/")
    _announce(runtime, pid=os.getpid(), url="http://127.0.0.1:2/base")
    found = servers(_env(runtime))
    assert [(s.url, s.token) for s in found] == [("http://127.0.0.1:2/base/", "t0k")]


def test_under_jupyterhub_the_api_token_authenticates(tmp_path, monkeypatch):
    runtime = tmp_path / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    # A single-user server announces itself with no token of its own: the hub's token is the key.
    _announce(runtime, pid=os.getpid(), url="http://127.0.0.1:3/user/ada/", token="")
    hub = {"JUPYTERHUB_API_TOKEN": "hub-secret", "JUPYTERHUB_SERVICE_PREFIX": "/user/ada/"}
    assert [(s.url, s.token) for s in servers(_env(runtime, **hub))] == [("http://127.0.0.1:3/user/ada/", "hub-secret")]
    # Without a file it can see, the hub's service URL is the server.
    empty = tmp_path / "empty"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(empty))
    hub["JUPYTERHUB_SERVICE_URL"] = "http://127.0.0.1:4/user/ada"
    assert [(s.url, s.token) for s in servers(_env(empty, **hub))] == [("http://127.0.0.1:4/user/ada/", "hub-secret")]


def test_no_server_file_is_unavailable_at_once(tmp_path, monkeypatch):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    started = time.monotonic()
    with pytest.raises(Unavailable, match="no running Jupyter server"):
        find(timeout=5, environ=_env(runtime), connection_file=str(runtime / "kernel-abc.json"))
    assert time.monotonic() - started < 5


def _refusing_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runtime dir announcing a server on a port nobody listens on."""
    runtime = tmp_path / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _announce(runtime, pid=os.getpid(), url=f"http://127.0.0.1:{port}/")
    return runtime


def test_a_refusing_server_is_unavailable_with_the_reason(tmp_path, monkeypatch):
    runtime = _refusing_server(tmp_path, monkeypatch)
    with pytest.raises(Unavailable, match="api/sessions failed"):
        find(timeout=5, environ=_env(runtime), connection_file=str(runtime / "kernel-abc.json"))


def test_a_notebook_whose_servers_tell_no_sessions_is_not_told_to_open_it(tmp_path, monkeypatch):
    # Opening the notebook would not help: no server could be asked; its connection file would.
    runtime = _refusing_server(tmp_path, monkeypatch)
    with pytest.raises(Unavailable) as refused:
        notebook_kernel(tmp_path / "analysis.ipynb", timeout=5, environ=_env(runtime))
    message = str(refused.value)
    assert "api/sessions failed" in message and "open the notebook" not in message, message
    assert message.endswith("(no server told its sessions: pass the kernel's connection file instead)"), message


def test_a_server_that_never_answers_is_given_up_within_the_timeout(tmp_path, monkeypatch):
    runtime = tmp_path / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # accepts and reads nothing back: a hung server
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        _announce(runtime, pid=os.getpid(), url=f"http://127.0.0.1:{listener.getsockname()[1]}/")
        started = time.monotonic()
        with pytest.raises(Unavailable, match="timed out"):
            find(timeout=0.5, environ=_env(runtime), connection_file=str(runtime / "kernel-abc.json"))
        assert time.monotonic() - started < 2  # the 0.5 s budget, with room for a loaded machine
    finally:
        stop.set()
        thread.join(2)
        listener.close()
        for conn in accepted:
            conn.close()
