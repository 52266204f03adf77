"""Per-path locks that serialise `write` and `edit` on one file (contract 4.4).

Calls of one batch run concurrently; two mutations of the same file must not interleave their
read → replace → write, or one edit would be silently lost. The key is the lexically normalised
absolute path, so `a.txt`, `./a.txt` and `<cwd>/a.txt` share a lock (symlinks are not resolved:
that would need I/O before the lock is taken, which would break dispatch order).
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["PathLocks"]


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class PathLocks:
    """A lock per path, granted in request order (asyncio.Lock is FIFO); unused ones are dropped."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    @staticmethod
    def key(path: str, *, cwd: str) -> str:
        """The lock key of `path` relative to `cwd`: absolute and lexically normalised."""
        return posixpath.normpath(posixpath.join(cwd, path))

    def __len__(self) -> int:
        """Number of paths currently locked or waited on."""
        return len(self._entries)

    @asynccontextmanager
    async def hold(self, path: str, *, cwd: str) -> AsyncIterator[None]:
        """Hold the lock of `path` for the duration of the block."""
        key = self.key(path, cwd=cwd)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
        # Count before awaiting so the entry is not dropped while we queue on it.
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]
