"""A lock across processes, so parallel test workers build a shared folder (a venv, npm's
node_modules) once: the first builds it, the others wait and then find it built."""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
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
