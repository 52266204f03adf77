"""A lock across processes, so parallel test workers build a shared folder (a venv, npm's
node_modules) once: the first builds it, the others wait and then find it built. And the one way
the tests install a Debian package they need (PostgreSQL, bubblewrap, Chromium), under that lock."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

# apt-get and dpkg allow one run at a time on the machine: workers installing Debian packages
# (Chromium, PostgreSQL) take turns.
APT = Path(tempfile.gettempdir()) / "flue-tests-apt-get"


@contextmanager
def exclusive(target: Path) -> Iterator[None]:
    """Hold an exclusive lock named for `target` (`<target>.lock` beside it) until the block ends."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def apt_install(packages: list[str], *, present: Callable[[], bool]) -> str | None:
    """Install Debian's `packages` with apt-get unless `present()` already holds; why it could
    not be done, or None. Needs root; the first worker installs, the others wait for it."""
    if present():
        return None
    names = " ".join(packages)
    if os.geteuid() != 0:
        return f"{names}: not installed, and installing it (apt-get install {names}) needs root"
    if shutil.which("apt-get") is None:
        return f"{names}: not installed, and there is no apt-get on this machine"
    with exclusive(APT):
        if present():  # another worker installed it meanwhile
            return None
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
            done = subprocess.run(cmd, env=env, check=False, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                return f"`{' '.join(cmd)}` failed: {done.stderr.strip()[-500:]}"
    return None if present() else f"apt-get installed {names}, but what the tests need from it is not there"
