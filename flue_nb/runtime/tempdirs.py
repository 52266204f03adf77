"""Private temp dirs that outlive no process (a kernel's sockets, the sandbox proxy's socket).

A process killed with SIGKILL runs no exit handler, so the dir it made stayed in the temp dir
for good: one per killed kernel. Each dir made here holds a mark file its process keeps locked
(`flock`, released by the OS when the process ends, whatever ends it, and seen across PID
namespaces); making the next dir of the same prefix removes this user's dirs whose mark nobody
holds any more. A dir without a mark (made by an older version, or being made) is left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import threading

__all__ = ["private_dir", "remove", "sweep"]

_MARK = ".flue-owner"
_held: dict[str, int] = {}
_lock = threading.Lock()


def private_dir(prefix: str) -> str:
    """A new temp dir (mode 0700) of `prefix`, marked as this process's, after `sweep(prefix)`."""
    sweep(prefix)
    path = tempfile.mkdtemp(prefix=prefix)
    # Locked before it gets its name: a sweep never sees the mark of a live dir unlocked.
    fd, draft = tempfile.mkstemp(dir=path, prefix=".mark-")
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.rename(draft, os.path.join(path, _MARK))
    with _lock:
        _held[path] = fd
    return path


def remove(path: str) -> None:
    """Remove a dir `private_dir` made, and let its mark go."""
    with _lock:
        fd = _held.pop(path, None)
    shutil.rmtree(path, ignore_errors=True)
    if fd is not None:
        os.close(fd)


def sweep(prefix: str) -> list[str]:
    """Remove this user's temp dirs of `prefix` whose process is gone; the ones removed."""
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(prefix)]
    except OSError:
        return []
    gone = []
    for name in names:
        path = os.path.join(root, name)
        with _lock:
            if path in _held:
                continue
        try:
            st = os.lstat(path)
            fd = os.open(os.path.join(path, _MARK), os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its process holds it: alive
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
    return gone
