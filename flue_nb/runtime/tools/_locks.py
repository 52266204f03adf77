"""Per-path locks that serialise `write` and `edit` on one file (contract 4.4), and the ordered
read/write gate of one MCP server's calls.

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

__all__ = ["OrderedGate", "PathLocks"]


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


class OrderedGate:
    """Calls granted in arrival order: reads overlap one another, a write runs alone.

    A write waits for every call that arrived before it; every call that arrives after a write
    waits for that write. So a batch `write a, read a` reads what was written, while a batch of
    reads runs at once.
    """

    def __init__(self) -> None:
        self._write: asyncio.Future[None] | None = None
        """The last write that arrived (done when it finished)."""
        self._reads: list[asyncio.Future[None]] = []
        """Reads that arrived after it."""

    @asynccontextmanager
    async def read(self) -> AsyncIterator[None]:
        """Run the block once every earlier write has finished."""
        before = self._write
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reads.append(mine)
        try:
            if before is not None and not before.done():
                await asyncio.wait({before})
            yield
        finally:
            mine.set_result(None)
            if mine in self._reads:
                self._reads.remove(mine)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[None]:
        """Run the block alone, once every earlier call has finished."""
        before = {f for f in (self._write, *self._reads) if f is not None and not f.done()}
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._write, self._reads = mine, []
        try:
            if before:
                await asyncio.wait(before)
            yield
        finally:
            mine.set_result(None)
            if self._write is mine:
                self._write = None
