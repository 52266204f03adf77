"""Finding, from inside a kernel, the Jupyter server that started it and the notebook it runs.

The servers announce themselves in `jpserver-<pid>.json` files in the Jupyter runtime dir (`url`,
`token`, `root_dir`, `pid`); under JupyterHub the single-user server's token is the kernel's
`JUPYTERHUB_API_TOKEN`. The kernel id is the stem of the kernel's connection file, and the
server's `GET /api/sessions` maps it to the notebook's path (and, from outside a kernel, a
notebook's path to its kernel: `notebook_kernel`). Every request has a bounded timeout.
Standard library only: nothing here needs the `live` extra.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Found",
    "NotebookKernel",
    "Server",
    "Unavailable",
    "find",
    "kernel_id",
    "notebook_kernel",
    "own_connection_file",
    "request",
    "servers",
]


class Unavailable(Exception):
    """No live document for this kernel; the message says why, for the model and the person."""


@dataclass(frozen=True)
class Server:
    """A running Jupyter server this process can talk to."""

    url: str
    """Its base URL, ending in `/` (the base_url/JupyterHub prefix included)."""
    token: str
    root_dir: str | None = None
    """The directory its notebook paths are relative to, when it says (`jpserver-*.json`)."""


@dataclass(frozen=True)
class Found:
    """The server and the notebook path (relative to its root) this kernel runs."""

    server: Server
    path: str


def own_connection_file() -> str | None:
    """This kernel's connection file, or None outside a kernel (terminal IPython, plain Python)."""
    # Outside a kernel, ipykernel is not imported for the question: from the warm-up thread that
    # import defined IPython's magics classes while the main thread defined others (see
    # `write_tools._is_kernel_shell`).
    app = sys.modules.get("ipykernel.kernelapp")
    if app is None or not app.IPKernelApp.initialized():
        return None
    try:
        from ipykernel.connect import get_connection_file

        return str(get_connection_file())
    except Exception:  # noqa: BLE001 - no kernel app: no connection file
        return None


def kernel_id(connection_file: str | None) -> str | None:
    """A kernel's id: the stem of its connection file (`kernel-<id>.json`)."""
    if not connection_file:
        return None
    return Path(connection_file).stem.removeprefix("kernel-") or None


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True  # no pid to check: let the request decide
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def _runtime_dirs(env: Mapping[str, str], connection_file: str | None) -> list[Path]:
    dirs: list[Path] = []
    if env.get("JUPYTER_RUNTIME_DIR"):
        dirs.append(Path(env["JUPYTER_RUNTIME_DIR"]))
    else:
        try:
            from jupyter_core.paths import jupyter_runtime_dir

            dirs.append(Path(jupyter_runtime_dir()))
        except Exception:  # noqa: BLE001 - jupyter_core missing or misconfigured: the connection file's dir still counts
            pass
    # The server writes its kernels' connection files into its own runtime dir.
    if connection_file:
        dirs.append(Path(connection_file).parent)
    return list(dict.fromkeys(d.resolve() for d in dirs))


def servers(environ: Mapping[str, str] | None = None, *, connection_file: str | None = None) -> list[Server]:
    """The running servers announced in the runtime dirs (dead pids skipped), newest first."""
    env = os.environ if environ is None else environ
    hub_token = env.get("JUPYTERHUB_API_TOKEN", "")
    found: dict[str, tuple[float, Server]] = {}
    for folder in _runtime_dirs(env, connection_file):
        for file in folder.glob("jpserver-*.json"):
            try:
                info = json.loads(file.read_text())
                mtime = file.stat().st_mtime
            except (OSError, ValueError):
                continue  # a server writing or removing its file right now
            url = info.get("url") if isinstance(info, dict) else None
            if not isinstance(url, str) or not _alive(info.get("pid")):
                continue
            token = str(info.get("token") or "") or hub_token
            root = info.get("root_dir") or info.get("notebook_dir")
            server = Server(url.rstrip("/") + "/", token, root if isinstance(root, str) and root else None)
            found.setdefault(url, (mtime, server))
    hub_url = env.get("JUPYTERHUB_SERVICE_URL", "")
    if hub_url and hub_token and not found:
        # A single-user server whose runtime dir this kernel cannot see.
        found[hub_url] = (0.0, Server(hub_url.rstrip("/") + "/", hub_token))
    return [s for _, s in sorted(found.values(), key=lambda p: -p[0])]


# The kernel talks to the server that started it (loopback, or the hub's internal address): an
# HTTP(S)_PROXY meant for the internet must not route these requests.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def request(server: Server, method: str, path: str, *, body: Any = None, timeout: float) -> Any:
    """One JSON request to the server, bounded by `timeout`; raises `OSError` subclasses on failure."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(urllib.parse.urljoin(server.url, path), data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if server.token:
        req.add_header("Authorization", f"token {server.token}")
    with _DIRECT.open(req, timeout=max(timeout, 0.05)) as response:
        return json.loads(response.read() or b"null")


def _sessions(server: Server, timeout: float) -> list[dict[str, Any]]:
    data = request(server, "GET", "api/sessions", timeout=timeout)
    return [s for s in data if isinstance(s, dict)] if isinstance(data, list) else []


def _path_of(session: Mapping[str, Any]) -> str | None:
    notebook = session.get("notebook")
    path = session.get("path") or (notebook.get("path") if isinstance(notebook, dict) else None)
    return path if isinstance(path, str) and path.endswith(".ipynb") else None


def find(*, timeout: float, environ: Mapping[str, str] | None = None, connection_file: str | None = None) -> Found:
    """The server running a notebook session with this kernel, and the notebook's path there.

    Raises `Unavailable` saying why when there is none, within `timeout` seconds overall.
    """
    deadline = time.monotonic() + timeout
    connection_file = connection_file or own_connection_file()
    kid = kernel_id(connection_file)
    if kid is None:
        raise Unavailable("this Python is not a Jupyter kernel (no connection file), so it has no notebook document")
    candidates = servers(environ, connection_file=connection_file)
    if not candidates:
        raise Unavailable("no running Jupyter server was found for this kernel (no jpserver-*.json in its runtime dir)")
    notes: list[str] = []
    for server, sessions in _asked(candidates, deadline, timeout, notes):
        for session in sessions:
            kernel = session.get("kernel")
            if isinstance(kernel, dict) and kernel.get("id") == kid:
                path = _path_of(session)
                if path is not None:
                    return Found(server, path)
    why = "; ".join(notes) or "no server has a notebook session with this kernel (a console or a script?)"
    raise Unavailable(f"no notebook session for kernel {kid}: {why}")


@dataclass(frozen=True)
class NotebookKernel:
    """The kernel a Jupyter server runs for a notebook, as a process outside it finds it."""

    server: Server
    path: str
    """The notebook's path relative to the server's root."""
    kernel_id: str
    connection_file: str


def notebook_kernel(
    notebook: str | os.PathLike[str], *, timeout: float, environ: Mapping[str, str] | None = None
) -> NotebookKernel:
    """The running kernel of the notebook at `notebook` (a path on this machine), found through
    the sessions API of the Jupyter servers announced in the runtime dir; its connection file is
    the one the server wrote there (`kernel-<id>.json`). Raises `Unavailable` saying why not."""
    deadline = time.monotonic() + timeout
    env = os.environ if environ is None else environ
    wanted = Path(notebook).expanduser().resolve()
    candidates = servers(env)
    if not candidates:
        raise Unavailable(
            "no running Jupyter server was found (no jpserver-*.json in the Jupyter runtime dir "
            f"{', '.join(str(d) for d in _runtime_dirs(env, None)) or '(none)'})"
        )
    notes: list[str] = []
    answered = False
    for server, sessions in _asked(candidates, deadline, timeout, notes):
        answered = True
        open_here = []
        for session in sessions:
            path, kernel = _path_of(session), session.get("kernel")
            if path is None or not isinstance(kernel, dict) or not isinstance(kernel.get("id"), str):
                continue
            open_here.append(path)
            if not _same_notebook(server, path, wanted):
                continue
            kid = kernel["id"]
            for folder in _runtime_dirs(env, None):
                file = folder / f"kernel-{kid}.json"
                if file.is_file():
                    return NotebookKernel(server, path, kid, str(file))
            raise Unavailable(
                f"{server.url} runs {path} in kernel {kid}, but its connection file kernel-{kid}.json is not in "
                "this machine's Jupyter runtime dir (a remote server?): pass the connection file itself"
            )
        notes.append(f"{server.url}: open notebooks: {', '.join(open_here) or 'none'}")
    # Opening the notebook helps only where a server told its sessions; one that refused (a
    # password and no token, say) or did not answer never will: its kernel is named by its file.
    what = (
        "open the notebook in Jupyter first"
        if answered
        else "no server told its sessions: pass the kernel's connection file instead"
    )
    raise Unavailable(f"no running kernel for {wanted}: {'; '.join(notes)} ({what})")


def _same_notebook(server: Server, path: str, wanted: Path) -> bool:
    """Whether the server's session path names `wanted`: resolved against its root when it says
    which, else by the trailing parts of the path."""
    if server.root_dir:
        return Path(server.root_dir, path).expanduser().resolve() == wanted
    parts = Path(path).parts
    return bool(parts) and wanted.parts[-len(parts) :] == parts


def _asked(
    candidates: list[Server], deadline: float, timeout: float, notes: list[str]
) -> Iterator[tuple[Server, list[dict[str, Any]]]]:
    """Each server's sessions (`/api/sessions`), asked in turn while the time lasts; what went
    wrong with one is added to `notes` and the next is asked."""
    for server in candidates:
        left = deadline - time.monotonic()
        if left <= 0:
            notes.append(f"{server.url}: not asked, the {timeout:g} s budget ran out")
            return
        try:
            sessions = _sessions(server, left)
        except urllib.error.HTTPError as exc:
            notes.append(f"{server.url}: /api/sessions answered HTTP {exc.code}")
            continue
        except (OSError, ValueError) as exc:
            notes.append(f"{server.url}: /api/sessions failed ({type(exc).__name__}: {exc})")
            continue
        yield server, sessions
