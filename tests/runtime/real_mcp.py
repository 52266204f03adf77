"""The reference MCP servers the real-server tests run, installed by the project's own files.

- npm: `@modelcontextprotocol/server-everything`, `server-filesystem` and `server-memory`, pinned
  by `real_servers/package.json` and its lock file, installed with `npm ci` into
  `.mcp-servers/npm`.
- PyPI: `mcp-server-time` and `mcp-server-git` (`PYTHON_PINS`), in a venv of their own,
  `.mcp-servers/venv`, so the main `.venv` never imports them.

Both are cached across runs (a stamp names what was installed). Anything that cannot be had
raises `Unavailable` saying why; the tests skip on it, except under CI (`CI=true`), where they fail.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp_client import serving

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from locks import exclusive  # noqa: E402
from venvs import Unavailable, venv_python  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / ".mcp-servers"
PINS = Path(__file__).with_name("real_servers")
PYTHON_PINS = ["mcp-server-time==2026.10.19", "mcp-server-git==2026.10.19"]


def _run(cmd: list[str], cwd: Path | None = None, timeout: float = 900) -> None:
    done = subprocess.run(cmd, cwd=cwd, check=False, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise Unavailable(f"`{' '.join(cmd)}` failed: {(done.stderr or done.stdout).strip()[-800:]}")


def _stamp(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()


def npm_servers() -> Path:
    """`.mcp-servers/npm/node_modules/@modelcontextprotocol`, installed by `npm ci` when missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise Unavailable("node and npm are needed for the reference servers (apt-get install nodejs npm)")
    folder = HOME / "npm"
    manifest, lock = (PINS / "package.json").read_bytes(), (PINS / "package-lock.json").read_bytes()
    want = _stamp(manifest, lock)
    stamp = folder / ".installed"
    with exclusive(folder):  # one test worker installs; the others wait for it
        if not (stamp.exists() and stamp.read_text() == want):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "package.json").write_bytes(manifest)
            (folder / "package-lock.json").write_bytes(lock)
            _run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=folder)
            stamp.write_text(want)
    return folder / "node_modules" / "@modelcontextprotocol"


def python_servers() -> Path:
    """`.mcp-servers/venv/bin`, holding `mcp-server-time` and `mcp-server-git`."""
    return venv_python(HOME / "venv", PYTHON_PINS).parent


def node_command(package: str, *args: str) -> list[str]:
    """The command line of an npm reference server (`everything`, `filesystem`, `memory`)."""
    return ["node", str(npm_servers() / f"server-{package}" / "dist" / "index.js"), *args]


def children_running(marker: str) -> list[int]:
    """Pids of this process's children whose command line contains `marker`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and marker in cmdline:
            pids.append(int(entry.name))
    return pids


def kill_child(marker: str) -> int:
    """SIGKILL this process's one child running `marker`, wait until it has ended; its pid."""
    [pid] = children_running(marker)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    # Until it is a zombie or reaped, not until its command line reads empty: that happens
    # early in its exit, while its pipes are still open (a call sent then fails as "went away").
    while not _ended(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid


def _ended(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat.rsplit(b")", 1)[-1].split()[:1] in ([b"Z"], [b"X"])


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def everything_http(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """server-everything's streamable HTTP transport on http://127.0.0.1:PORT/mcp, killed on exit."""
    env = {**os.environ, "PORT": str(port)}
    with serving([*node_command("everything"), "streamableHttp"], port, "server-everything's HTTP", env) as proc:
        yield proc
