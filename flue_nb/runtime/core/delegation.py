"""Delegation (contract 14): the `task` tool runs a subagent with a fresh context."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Literal

from flue_nb.runtime.sandbox import DirEntry, ExecResult, FileStat, Sandbox, StreamingWrites

__all__ = ["ScopedSandbox", "scoped"]


class ScopedSandbox:
    """The parent's sandbox seen from a subdirectory (a task's `cwd`): relative paths resolve there.

    It has no `tools()`: a sandbox's own tool list is bound to the sandbox itself, so scoped runs
    get the six. Optional capabilities it forwards exactly when the parent has them (`scoped`
    picks `_ScopedStreaming` for a parent with `write_chunks`).
    """

    def __init__(self, inner: Sandbox, cwd: str) -> None:
        self._inner = inner
        self._cwd = cwd

    @property
    def cwd(self) -> str:
        return self._cwd

    def _abs(self, path: str) -> str:
        return os.path.join(self._cwd, path)

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
        where = self._abs(cwd) if cwd else self._cwd
        return await self._inner.exec(command, cwd=where, env=env, timeout=timeout, max_output=max_output, keep=keep)

    async def read_file(self, path: str) -> bytes:
        return await self._inner.read_file(self._abs(path))

    def read_chunks(self, path: str, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        return self._inner.read_chunks(self._abs(path), chunk_size)

    async def write_file(self, path: str, data: bytes) -> None:
        await self._inner.write_file(self._abs(path), data)

    async def stat(self, path: str) -> FileStat:
        return await self._inner.stat(self._abs(path))

    async def list_dir(self, path: str) -> list[DirEntry]:
        return await self._inner.list_dir(self._abs(path))

    async def realpath(self, path: str) -> str:
        return await self._inner.realpath(self._abs(path))

    def keep_result(self, text: str) -> str | None:
        """Where the parent's sandbox keeps an oversized result (None: it keeps none)."""
        keep = getattr(self._inner, "keep_result", None)
        return keep(text) if keep is not None else None


class _ScopedStreaming(ScopedSandbox):
    """A scoped view of a sandbox that can stream a write: so can the view."""

    _streaming: StreamingWrites

    def __init__(self, inner: Sandbox, cwd: str, streaming: StreamingWrites) -> None:
        super().__init__(inner, cwd)
        self._streaming = streaming

    async def write_chunks(self, path: str, chunks: AsyncIterator[bytes]) -> int:
        return await self._streaming.write_chunks(self._abs(path), chunks)


def scoped(sandbox: Sandbox | None, cwd: str | None) -> Sandbox | None:
    """The sandbox a task runs in: the parent's, seen from `cwd` when one is given."""
    if sandbox is None or not cwd:
        return sandbox
    where = os.path.normpath(os.path.join(sandbox.cwd, cwd))
    if isinstance(sandbox, StreamingWrites):
        return _ScopedStreaming(sandbox, where, sandbox)
    return ScopedSandbox(sandbox, where)
