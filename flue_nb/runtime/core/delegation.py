"""Delegation (contract 14): the `task` tool runs a subagent with a fresh context."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["ScopedSandbox", "scoped"]


class ScopedSandbox:
    """The parent's sandbox seen from a subdirectory (a task's `cwd`): relative paths resolve there.

    It has no `tools()`: a sandbox's own tool list is bound to the sandbox itself, so scoped runs
    get the six.
    """

    def __init__(self, inner: Any, cwd: str) -> None:
        self._inner = inner
        self._cwd = cwd

    @property
    def cwd(self) -> str:
        return self._cwd

    def _abs(self, path: str) -> str:
        return os.path.join(self._cwd, path)

    async def exec(self, command: Any, *, cwd: str | None = None, **kw: Any) -> Any:
        return await self._inner.exec(command, cwd=self._abs(cwd) if cwd else self._cwd, **kw)

    async def read_file(self, path: str) -> bytes:
        data: bytes = await self._inner.read_file(self._abs(path))
        return data

    def read_chunks(self, path: str, chunk_size: int = 65536) -> Any:
        return self._inner.read_chunks(self._abs(path), chunk_size)

    async def write_file(self, path: str, data: bytes) -> None:
        await self._inner.write_file(self._abs(path), data)

    async def stat(self, path: str) -> Any:
        return await self._inner.stat(self._abs(path))

    async def list_dir(self, path: str) -> Any:
        return await self._inner.list_dir(self._abs(path))

    async def realpath(self, path: str) -> str:
        real: str = await self._inner.realpath(self._abs(path))
        return real

    def keep_result(self, text: str) -> str | None:
        """Where the parent's sandbox keeps an oversized result (None: it keeps none)."""
        keep = getattr(self._inner, "keep_result", None)
        return keep(text) if keep is not None else None


def scoped(sandbox: Any, cwd: str | None) -> Any:
    """The sandbox a task runs in: the parent's, seen from `cwd` when one is given."""
    if sandbox is None or not cwd:
        return sandbox
    return ScopedSandbox(sandbox, os.path.normpath(os.path.join(sandbox.cwd, cwd)))
