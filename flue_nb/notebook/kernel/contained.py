"""A Jupyter kernel that runs under the shell's sandbox: `flue-nb kernel install --sandboxed`
writes its kernelspec, and `python -m flue_nb.notebook.kernel.contained -f CONNECTION_FILE` (the
kernelspec's command) starts it.

The kernel process runs under `contain.Containment.wrap`, the same bubblewrap command line `bash`
gets: the workspace writable, the rest read-only, the secret places hidden, its own `/tmp` and
`/proc`, no capabilities, and a network namespace of its own whose only way out is the filtering
proxy, with the model provider's host allowed (`model_hosts`) besides the `--allow-host`s.

Why a relay: Jupyter writes the connection file and then connects to the kernel's five ZMQ
channels, over TCP on the host's loopback (or Unix sockets when told to). A kernel in its own
network namespace cannot bind the host's loopback, and keeping the host's network for it would
let its code reach any host. So this launcher, outside, binds the five endpoints the connection
file names, and the kernel binds Unix sockets (ZMQ's `ipc` transport) in a private directory
bound into the sandbox; each connection is relayed byte for byte (ZMTP is the same over TCP and
IPC). The kernel cannot open a connection to the host through the relay: only Jupyter's own
connections to it are carried.

Interrupts come as messages (`interrupt_mode: message`): the kernel runs in its own session, so
the signals Jupyter sends the launcher's process group do not reach it; SIGTERM or SIGKILL of the
launcher ends the sandbox with it (`--die-with-parent`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.sandbox.contain import KERNEL_SANDBOX_ENV, containment, unavailable
from flue_nb.runtime.tempdirs import private_dir, remove

__all__ = [
    "ANTHROPIC_DEFAULT_URL",
    "KERNEL_NAME",
    "MODEL_CREDENTIALS",
    "OPENAI_DEFAULT_URL",
    "install",
    "kernel_spec",
    "main",
    "model_hosts",
]

KERNEL_NAME = "flue-sandboxed"
"""The kernelspec's default name."""

MODEL_CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "AZURE_OPENAI_API_KEY")
"""The secret-looking variables the kernel keeps: the model providers read them."""

# The providers' defaults (`providers/anthropic.py`, `providers/openai.py`), not imported: the
# launcher starts with every kernel and stays light.
ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
_CHANNELS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
_CONNECT_TRIES = 1200  # x 50 ms: how long a relayed connection waits for the kernel's socket


def model_hosts(env: Mapping[str, str]) -> list[str]:
    """The `host:port`s the configured model providers are reached at: `ANTHROPIC_BASE_URL` (else
    Anthropic's API), `OPENAI_BASE_URL` (else OpenAI's, when `OPENAI_API_KEY` is set) and
    `AZURE_OPENAI_ENDPOINT`."""
    urls = [env.get("ANTHROPIC_BASE_URL") or ANTHROPIC_DEFAULT_URL]
    if env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_KEY"):
        urls.append(env.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_URL)
    if env.get("AZURE_OPENAI_ENDPOINT"):
        urls.append(env["AZURE_OPENAI_ENDPOINT"])
    out: list[str] = []
    for url in urls:
        parts = urlsplit(url.strip())
        try:
            port = parts.port or (80 if parts.scheme == "http" else 443)
        except ValueError:
            continue
        if not parts.hostname:
            continue
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        if f"{host}:{port}" not in out:
            out.append(f"{host}:{port}")
    return out


def kernel_spec(
    *,
    display_name: str,
    workspace: str | None = None,
    allow_hosts: Sequence[str] = (),
    hide_paths: Sequence[str] = (),
    keep_env: Sequence[str] = (),
    python: str = sys.executable,
) -> dict[str, Any]:
    """The `kernel.json` of a sandboxed kernel (its settings are the launcher's arguments)."""
    argv = [python, "-m", __name__, "-f", "{connection_file}"]
    if workspace is not None:
        argv += ["--workspace", workspace]
    for flag, values in (("--allow-host", allow_hosts), ("--hide", hide_paths), ("--keep-env", keep_env)):
        for value in values:
            argv += [flag, value]
    return {
        "argv": argv,
        "display_name": display_name,
        "language": "python",
        "interrupt_mode": "message",
        "metadata": {"flue_nb": {"sandboxed": True}},
    }


def install(
    *,
    name: str = KERNEL_NAME,
    display_name: str = "Python 3 (flue sandbox)",
    user: bool = True,
    prefix: str | None = None,
    workspace: str | None = None,
    allow_hosts: Sequence[str] = (),
    hide_paths: Sequence[str] = (),
    keep_env: Sequence[str] = (),
) -> str:
    """Install the sandboxed kernel's kernelspec (in the user's Jupyter data dir unless `prefix`
    is given) and return its directory; ConfigError where bubblewrap cannot contain it."""
    from jupyter_client.kernelspec import KernelSpecManager

    missing = unavailable()
    if missing is not None:
        why, fix = missing
        raise ConfigError(f"the sandboxed kernel was not installed, because {why}. To fix: {fix}.")
    containment("bwrap", allow_hosts, hide_paths)  # the same checks the launcher makes, now
    if workspace is not None:
        workspace = os.path.abspath(os.path.expanduser(workspace))
        if not os.path.isdir(workspace):
            raise ConfigError(f"--workspace {workspace}: not a directory")
    spec = kernel_spec(
        display_name=display_name,
        workspace=workspace,
        allow_hosts=allow_hosts,
        hide_paths=[os.path.abspath(os.path.expanduser(p)) for p in hide_paths],
        keep_env=keep_env,
    )
    with tempfile.TemporaryDirectory(prefix="flue-kernelspec-") as tmp:
        with open(os.path.join(tmp, "kernel.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=1)
        _copy_logos(tmp)
        return str(
            KernelSpecManager().install_kernel_spec(
                tmp, kernel_name=name, user=user and prefix is None, prefix=prefix, replace=True
            )
        )


def _copy_logos(into: str) -> None:
    """ipykernel's Python logos, so the launcher shows the kernel as a Python one."""
    try:
        from ipykernel.kernelspec import RESOURCES
    except ImportError:
        return
    for name in os.listdir(RESOURCES):
        if name.startswith("logo-"):
            shutil.copy(os.path.join(RESOURCES, name), into)


def _kernel_env(environ: Mapping[str, str], keep: Sequence[str], says: str) -> dict[str, str]:
    """The kernel's environment: the launcher's, without the secrets redaction knows of (bar the
    model credentials and `keep`)."""
    from flue_nb.runtime.redact import secret_values

    secret = {name for _, name in secret_values(environ)} - {*MODEL_CREDENTIALS, *keep}
    env = {k: v for k, v in environ.items() if k not in secret}
    # Inside, the kernel's parent is the sandbox's init (PID 1): with Jupyter's PID ipykernel
    # would take that for its parent's death. 1 means "no parent to watch" (bwrap ends it with us).
    env["JPY_PARENT_PID"] = "1"
    env[KERNEL_SANDBOX_ENV] = says
    return env


_IGNORED = shutil.ignore_patterns("history.sqlite*", "*-journal", "*-wal", "security", "db", "log", "pid")


def _config_copies(environ: Mapping[str, str], into: str, workspace: str) -> dict[str, str]:
    """Writable copies of IPython's and matplotlib's directories, and the variables naming them.

    Both ignore a directory they cannot write to (IPython: "not a writable location, using a temp
    directory"), and with it the user's settings (`ipython_config.py`, `c.FlueMagics`, the
    matplotlibrc). The copies carry the settings in; what the kernel writes there is dropped."""
    home = environ.get("HOME") or os.path.expanduser("~")
    config = environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    wanted = {
        "IPYTHONDIR": [environ.get("IPYTHONDIR") or os.path.join(home, ".ipython")],
        "MPLCONFIGDIR": [
            environ.get("MPLCONFIGDIR") or os.path.join(config, "matplotlib"),
            os.path.join(cache, "matplotlib"),
        ],
    }
    out: dict[str, str] = {}
    for var, sources in wanted.items():
        real = os.path.realpath(sources[0])
        if var != "IPYTHONDIR" and (real == workspace or real.startswith(workspace.rstrip("/") + "/")):
            continue  # writable in there as it is (IPython's dir is not: it runs code later)
        copy = os.path.join(into, var.lower())
        os.makedirs(copy, exist_ok=True)
        for src in sources:
            if os.path.isdir(src):
                with contextlib.suppress(OSError, shutil.Error):
                    shutil.copytree(src, copy, ignore=_IGNORED, symlinks=True, dirs_exist_ok=True)
        out[var] = copy
    return out


def _inner_connection(info: Mapping[str, Any], directory: str) -> dict[str, Any]:
    """The connection file the kernel reads inside: the same key and ports, on Unix sockets."""
    inner = {k: v for k, v in info.items() if k not in ("transport", "ip")}
    inner.update(transport="ipc", ip=os.path.join(directory, "k"))
    return inner


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        pass


class _Relay:
    """Jupyter's connections to the kernel, each carried to the kernel's Unix socket."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.open: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    async def carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> None:
        """Carry one connection to `path`, waiting (while the sandbox runs) for the kernel to bind it."""
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.open.add(writer)
        try:
            inner = None
            for _ in range(_CONNECT_TRIES):
                try:
                    inner = await asyncio.open_unix_connection(path)
                    break
                except OSError:
                    if self.proc is None or self.proc.poll() is not None:
                        break
                    await asyncio.sleep(0.05)
            if inner is None:
                return
            in_reader, in_writer = inner
            self.open.add(in_writer)
            await asyncio.gather(_pump(reader, in_writer), _pump(in_reader, writer))
        finally:
            for w in (writer, *(() if inner is None else (inner[1],))):
                w.close()
                self.open.discard(w)
            self.tasks.discard(task)

    async def close(self) -> None:
        """Close every connection and wait for their relays to end (none is left to be cancelled)."""
        for w in list(self.open):
            w.close()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)


async def _run(command: list[str], env: dict[str, str], workdir: str, info: Mapping[str, Any], inner: str) -> int:
    """Bind Jupyter's endpoints, start the sandbox, relay until it ends; its exit code."""
    loop = asyncio.get_running_loop()
    relay = _Relay()
    servers = []
    for channel in _CHANNELS:
        port = int(info[channel])

        async def carry(r: asyncio.StreamReader, w: asyncio.StreamWriter, path: str = f"{inner}-{port}") -> None:
            await relay.carry(r, w, path)

        if info.get("transport", "tcp") == "ipc":
            servers.append(await asyncio.start_unix_server(carry, path=f"{info['ip']}-{port}"))
        else:
            servers.append(await asyncio.start_server(carry, host=info.get("ip") or "127.0.0.1", port=port))
    # Started from this (the main) thread: bwrap's --die-with-parent follows the thread that made it.
    proc = relay.proc = subprocess.Popen(
        command, env=env, cwd=workdir, stdin=subprocess.DEVNULL, start_new_session=True
    )
    loop.add_signal_handler(signal.SIGTERM, proc.terminate)
    try:
        return await loop.run_in_executor(None, proc.wait)
    finally:
        for server in servers:
            server.close()
        await relay.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {__name__}", description="start the sandboxed kernel")
    p.add_argument("-f", dest="connection_file", required=True, help="the connection file Jupyter wrote")
    p.add_argument("--workspace", help="the writable directory (default: the kernel's working directory)")
    p.add_argument(
        "--allow-host", action="append", default=[], metavar="HOST", help="a host reachable besides the model's"
    )
    p.add_argument(
        "--hide", action="append", default=[], metavar="PATH", help="a place hidden besides the standard ones"
    )
    p.add_argument("--keep-env", action="append", default=[], metavar="NAME", help="a secret variable the kernel keeps")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Start the kernel under bubblewrap and relay Jupyter's channels to it; refuse (exit 1,
    saying why on stderr) where bubblewrap cannot contain it, never start it uncontained."""
    args = _parser().parse_args(argv)
    missing = unavailable()
    if missing is not None:
        why, fix = missing
        print(
            f"flue sandboxed kernel: not started, because {why}; it never runs uncontained. To fix: {fix}, "
            "or choose another kernel.",
            file=sys.stderr,
        )
        return 1
    # Jupyter's Ctrl-C goes to the whole process group; an interrupt reaches the kernel as a message.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(args.connection_file, encoding="utf-8") as f:
        info = json.load(f)
    cwd = os.path.realpath(os.getcwd())
    workspace = os.path.realpath(args.workspace or cwd)
    workdir = cwd if cwd == workspace or cwd.startswith(workspace.rstrip("/") + "/") else workspace
    hosts = [*model_hosts(os.environ), *args.allow_host]
    try:
        box = containment("bwrap", hosts, args.hide)
    except ConfigError as exc:
        print(f"flue sandboxed kernel: not started: {exc.message}", file=sys.stderr)
        return 1
    says = f"writes only in {workspace}, secrets hidden, network only to {', '.join(hosts)} through the proxy"
    sockets = private_dir("flue-kernel-")
    try:
        inner = _inner_connection(info, sockets)
        inner_file = os.path.join(sockets, "kernel.json")
        with open(inner_file, "w", encoding="utf-8") as f:
            json.dump(inner, f)
        # History in memory: ~/.ipython is read-only in here (its startup files are code run later).
        kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", inner_file, "--HistoryManager.hist_file=:memory:"]
        env = _kernel_env(os.environ, args.keep_env, says)
        env.update(_config_copies(os.environ, sockets, workspace))
        command, env = box.wrap(
            kernel, workspace=workspace, workdir=workdir, env=env, binds=[sockets], new_session=True
        )
        return asyncio.run(_run(command, env, workdir, info, inner["ip"]))
    finally:
        with contextlib.suppress(OSError):
            remove(sockets)


if __name__ == "__main__":
    sys.exit(main())
