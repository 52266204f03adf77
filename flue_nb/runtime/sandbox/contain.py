"""Containment: the commands a sandbox starts run under bubblewrap (`bwrap`), not as the user.

`Containment(level, allow_hosts, hide_paths).wrap(argv, ...)` turns a command into one that runs
in fresh namespaces: the file system read-only except the workspace (where the user's places
that run code later, such as ~/.ipython and ~/.bashrc, stay read-only: `autorun`), the user's
secret places masked (`SECRET_PLACES`, `.env` files outside the workspace, `hide_paths`), a
private `/tmp`, `/run` and `/proc` (so no other process's `/proc/PID/environ`), no network. With `allow_hosts`,
the listed hosts are reachable through `proxy.HostProxy`, a filtering HTTP proxy in this process,
whose Unix socket is bind-mounted in; `_forward.py` runs first inside the sandbox and serves it on
a loopback port that `HTTP(S)_PROXY` name. Where bubblewrap is missing or cannot make namespaces,
`refusal()` says why and how to fix it, and the sandbox refuses to run the command rather than
run it uncontained; only `level="none"` runs commands as the user.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from flue_nb.runtime.cache import cache_dir
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.sandbox.autorun import _under, places_in

__all__ = [
    "KERNEL_SANDBOX_ENV",
    "SECRET_PLACES",
    "Containment",
    "SandboxLevel",
    "check_level",
    "containment",
    "inside_sandboxed_kernel",
    "unavailable",
]

SandboxLevel = Literal["auto", "bwrap", "none"]

SECRET_PLACES = (
    "~/.ssh",
    "~/.aws",
    "~/.config/gcloud",
    "~/.azure",
    "~/.kube",
    "~/.docker/config.json",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/gh",
    "~/.gnupg",
    "~/.pypirc",
    "~/.npmrc",
    # Jupyter's connection files (kernel HMAC keys) and the server's token files.
    "~/.local/share/jupyter/runtime",
)
"""Places masked inside the sandbox (where they exist), before the user's own `hide_paths`."""

_PRIVATE = ("/tmp", "/run")
"""Fresh empty tmpfs inside: the host's sockets (ssh-agent, docker, D-Bus) and temp files live there."""
_PROXY_DIR = "/run/flue" if os.path.isdir("/run") else "/tmp/.flue"
_PROXY_SOCKET = f"{_PROXY_DIR}/proxy.sock"
_FORWARDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_forward.py")

KERNEL_SANDBOX_ENV = "FLUE_SANDBOXED_KERNEL"
"""Set by the sandboxed kernel's launcher to what its sandbox allows, in words."""

_INSTALL = (
    "install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install "
    "bubblewrap`; Arch: `sudo pacman -S bubblewrap`)"
)
_USERNS = (
    "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or user.max_user_namespaces > 0)"
)
_OPT_OUT = (
    "opt out and run commands as yourself with sandbox='none' (`c.FlueMagics.sandbox = \"none\"`, or "
    '`flue.kernel(sandbox="none")`)'
)


def _bwrap() -> str | None:
    return shutil.which("bwrap") if sys.platform.startswith("linux") else None


def unavailable() -> tuple[str, str] | None:
    """Why bubblewrap cannot contain anything on this machine and how to fix it, or None when it can."""
    bwrap = _bwrap()
    if bwrap is None:
        where = "on this system" if sys.platform.startswith("linux") else f"on {sys.platform} (it is Linux-only)"
        return f"bubblewrap (`bwrap`) is not installed {where}", _INSTALL
    why = _probe(bwrap)
    if why is not None:
        return f"bubblewrap cannot create a sandbox here ({why})", _USERNS
    return None


def inside_sandboxed_kernel() -> str:
    """What the sandbox of the kernel this process runs in allows (`KERNEL_SANDBOX_ENV`), or ""
    outside one. The variable alone is not taken for it: PID 1 must be bubblewrap's."""
    said = os.environ.get(KERNEL_SANDBOX_ENV, "")
    if not said:
        return ""
    try:
        with open("/proc/1/comm", encoding="utf-8") as f:
            return said if f.read().strip() == "bwrap" else ""
    except OSError:
        return ""


def check_level(level: object) -> SandboxLevel:
    """`level` if it names a sandbox level, else a ConfigError listing them."""
    if level not in get_args(SandboxLevel):
        raise ConfigError(f"sandbox must be 'auto', 'bwrap' or 'none', got {level!r}")
    return level  # type: ignore[return-value]


def _check_hosts(hosts: Sequence[str]) -> tuple[str, ...]:
    out = []
    for host in hosts:
        if not isinstance(host, str) or not host.strip():
            raise ConfigError(f"allow_hosts takes host names, e.g. ['pypi.org', '*.github.com'], not {host!r}")
        if "/" in host or " " in host.strip():
            raise ConfigError(
                f"allow_hosts takes host names (optionally host:port), not URLs: {host!r}; e.g. "
                "'api.example.com' or 'api.example.com:443'"
            )
        out.append(host.strip().lower())
    return tuple(out)


@functools.cache
def _probe(bwrap: str) -> str | None:
    """Why `bwrap` cannot make this sandbox's namespaces here (its own words), or None when it can."""
    try:
        done = subprocess.run(
            [bwrap, *_BASE, "--", "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode == 0:
        return None
    return (done.stderr or done.stdout).decode(errors="replace").strip() or f"exit code {done.returncode}"


_BASE = (
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    # A user namespace is what lets an unprivileged user make the others. As root it adds nothing
    # (`--cap-drop ALL` below leaves the command no capabilities) and costs several ms per command.
    *(() if os.geteuid() == 0 else ("--unshare-user-try",)),
    # As root, bwrap keeps the command's capabilities unless told: with CAP_SYS_ADMIN it could
    # `umount` a mask (and read ~/.aws) or remount / read-write and write the host's /etc.
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    *[a for p in _PRIVATE if os.path.isdir(p) and not os.path.islink(p) for a in ("--tmpfs", p)],
)
"""The mounts every sandboxed command gets before the workspace and the masks."""


def _empty_dir(workspace: str) -> str:
    """An empty read-only directory to mount over a hidden one.

    One kept per user, checked at each use: `empty` in flue_nb's cache dir, else (the cache dir is
    in the workspace, as when Jupyter starts in ~) `flue-hidden-UID` in the temp dir, whose sticky
    bit keeps other users from replacing it. One made per process instead was left in /tmp by
    every kernel that was killed (no exit handler runs); it stays the last resort.
    """
    # The parent is resolved, the directory itself is not: a symlink in its place is not taken.
    for place, name in ((cache_dir(), "empty"), (tempfile.gettempdir(), f"flue-hidden-{os.geteuid()}")):
        kept = os.path.join(os.path.realpath(place), name)
        if not _under(kept, workspace) and _usable(kept):
            return kept
    return _own_empty_dir()


def _usable(kept: str) -> bool:
    """Whether `kept` is (or now is) an empty directory of this user's, read-only to all."""
    try:
        os.makedirs(kept, mode=0o755, exist_ok=True)
        info = os.lstat(kept)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or os.listdir(kept):
            return False
        if stat.S_IMODE(info.st_mode) != 0o555:
            os.chmod(kept, 0o555)
        return True
    except OSError:
        return False


@functools.cache
def _own_empty_dir() -> str:
    path = tempfile.mkdtemp(prefix="flue-hidden-")
    os.chmod(path, 0o555)
    atexit.register(os.rmdir, path)
    return path


@dataclass(frozen=True)
class Containment:
    """How commands run: under bubblewrap (`auto`, `bwrap`) or as the user (`none`)."""

    level: SandboxLevel = "auto"
    allow_hosts: tuple[str, ...] = ()
    """Hosts (`name`, `*.domain`, `name:port`) reachable through the filtering proxy; empty: no network."""
    hide_paths: tuple[str, ...] = ()
    """Places masked on top of `SECRET_PLACES` (`~` expanded)."""

    @property
    def active(self) -> bool:
        """Whether commands are meant to run contained (refused when they cannot be)."""
        return self.level != "none"

    def bwrap(self) -> str | None:
        """The bubblewrap binary on this machine, or None."""
        return _bwrap()

    def refusal(self) -> str | None:
        """Why commands cannot run contained here and what to do, or None when they can."""
        if not self.active or inside_sandboxed_kernel():
            return None
        missing = unavailable()
        if missing is None:
            return None
        why, fix = missing
        return (
            f"flue sandbox ({self.level}): the command was not run, because {why}, and commands never "
            f"run uncontained unless you opt out. To fix: {fix}, or {_OPT_OUT}."
        )

    def describe(self, workspace: str) -> str:
        """One line for `%flue status`: what a command can reach."""
        kernel = inside_sandboxed_kernel()
        if kernel:
            return f"{self.level}, inside the sandboxed kernel, whose sandbox holds every command: {kernel}"
        if not self.active:
            return "none: commands run as you, with your files and network"
        refused = self.refusal()
        if refused is not None:
            return f"{self.level}: unavailable, `bash` refuses to run ({'bwrap missing' if not self.bwrap() else 'bwrap failed'})"
        net = f"only {', '.join(self.allow_hosts)} through the proxy" if self.allow_hosts else "no network"
        return f"{self.level} (bubblewrap): writes only in {workspace}, secrets hidden, {net}"

    def masks(self, workspace: str) -> list[str]:
        """The existing places to mask, as real paths: secrets, `.env` files outside the workspace."""
        home = os.path.expanduser("~")
        places = [os.path.expanduser(p) for p in (*SECRET_PLACES, *self.hide_paths)]
        runtime = os.environ.get("JUPYTER_RUNTIME_DIR")
        if runtime:
            places.append(runtime)
        # `.env` files in the workspace's ancestors and in $HOME: a project's keys sit beside it.
        dirs = {home}
        parent = os.path.dirname(workspace)
        while True:
            dirs.add(parent)
            up = os.path.dirname(parent)
            if up == parent:
                break
            parent = up
        for d in sorted(dirs):
            try:
                names = os.listdir(d)
            except OSError:
                continue
            places += [os.path.join(d, n) for n in names if n == ".env" or n.startswith(".env.")]
        out: list[str] = []
        for place in places:
            if not os.path.lexists(place):
                continue
            real = os.path.realpath(place)
            if not os.path.exists(real):
                continue
            if any(_under(real, p) for p in _PRIVATE) and not _under(real, workspace):
                continue  # already behind a private tmpfs
            if os.path.basename(real).startswith(".env") and _under(real, workspace) and _under(place, workspace):
                continue  # the workspace's own .env is the user's to use
            if real not in out:
                out.append(real)
        return out

    def wrap(
        self,
        argv: Sequence[str],
        *,
        workspace: str,
        workdir: str,
        env: Mapping[str, str],
        binds: Sequence[str] = (),
        new_session: bool = False,
    ) -> tuple[list[str], dict[str, str]]:
        """`argv` and `env` made into the bubblewrap command that runs it contained.

        `binds` are directories writable inside besides the workspace, at the same path (the
        sandboxed kernel's socket directory); `new_session` starts the command in its own session
        (`setsid`), so signals sent to the caller's process group do not reach it.
        """
        if inside_sandboxed_kernel():
            # Already inside: nested bubblewrap cannot mount a /proc here, and the kernel's own
            # sandbox (files, /proc, network) holds whatever this command starts.
            return list(argv), {**env, "TMPDIR": "/tmp"}
        bwrap = self.bwrap()
        assert bwrap is not None, "wrap() after refusal() said None"
        workspace = os.path.realpath(workspace)
        masks = self.masks(workspace)
        args = [bwrap, *_BASE, *(("--new-session",) if new_session else ())]
        # A mask over a parent of the workspace goes first (left writable: the workspace's mount
        # point is made in it), so the workspace shows through it; the others go over the workspace.
        for real in [m for m in masks if _under(workspace, m)]:
            args += ["--tmpfs", real]
        args += ["--bind", workspace, workspace]
        for extra in binds:
            real = os.path.realpath(extra)
            args += ["--bind", real, real]
        for real in _needed_under_private(argv, workspace):
            args += ["--ro-bind", real, real]
        # Where the workspace is ~ (Jupyter started there), ~/.ipython's startup dir and ~/.bashrc
        # are in it: written from here, they would run code later, outside any sandbox.
        for real in places_in(workspace):
            args += ["--ro-bind", real, real]
        over = [m for m in masks if not _under(workspace, m)]
        empty = _empty_dir(workspace) if any(os.path.isdir(m) for m in over) else "/dev/null"
        for real in over:
            # One read-only bind of an empty directory (or /dev/null): one mount, not two.
            args += ["--ro-bind", empty if os.path.isdir(real) else "/dev/null", real]
        out_env = dict(env)
        out_env["TMPDIR"] = "/tmp"
        command = list(argv)
        if self.allow_hosts:
            from flue_nb.runtime.sandbox.proxy import proxy_for

            args += ["--bind", proxy_for(self.allow_hosts).socket_path, _PROXY_SOCKET]
            # The forwarder listens on loopback inside, sets HTTP(S)_PROXY, then execs the command.
            command = [sys.executable, "-I", "-S", _FORWARDER, _PROXY_SOCKET, "--", *command]
        args += ["--chdir", workdir, "--", *command]
        return args, out_env


def _needed_under_private(argv: Sequence[str], workspace: str) -> list[str]:
    """What a command needs that lives under a private tmpfs (a venv or a checkout in /tmp): this
    Python, its installation, flue_nb's own package (the forwarder; the whole package for a
    sandboxed kernel, which imports it from an editable checkout there) and the program run,
    read-only. Without it a venv under /tmp was not there inside (`bwrap: execvp ...: No such
    file`), and a kernel in a checkout under /tmp had no flue_nb."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(_FORWARDER)))
    wanted = [sys.prefix, sys.base_prefix, os.path.dirname(sys.executable), package]
    if argv and os.path.isabs(argv[0]):
        wanted.append(os.path.dirname(argv[0]))
    out: list[str] = []
    for path in wanted:
        real = os.path.realpath(path)
        if not os.path.isdir(real) or _under(real, workspace) or not any(_under(real, p) for p in _PRIVATE):
            continue
        if not any(_under(real, o) for o in out):
            out = [o for o in out if not _under(o, real)] + [real]
    return out


def containment(
    level: SandboxLevel, allow_hosts: Sequence[str] | None = None, hide_paths: Sequence[str] | None = None
) -> Containment:
    """A checked `Containment` (ConfigError naming the bad value)."""
    if isinstance(allow_hosts, str) or isinstance(hide_paths, str):
        raise ConfigError("allow_hosts and hide_paths take lists of strings, not one string")
    hosts = _check_hosts(allow_hosts or ())
    hidden = tuple(os.path.abspath(os.path.expanduser(p)) for p in hide_paths or ())
    level = check_level(level)
    if hosts and level == "none":
        raise ConfigError("allow_hosts needs a sandbox: with sandbox='none' every host is reachable already")
    return Containment(level, hosts, hidden)
