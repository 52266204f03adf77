"""The sandbox protocol: where an agent's file and shell tools act.

Tools are written against this small surface (whole-file verbs, no truncation) so any adapter —
the host (`local`), the live kernel (`flue_nb.notebook`), a container — gets the six standard
tools by composing the per-tool factories in `flue_nb.runtime.tools`. A sandbox that brings its
own tool list (contract 1.3) also has `tools()`: `flue_nb.runtime.tools.OwnTools` declares it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = ["DirEntry", "ExecResult", "FileStat", "Sandbox", "StreamingWrites"]


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What a finished command left: combined stdout+stderr, exit code, whether it timed out."""

    output: bytes
    exit_code: int
    timed_out: bool = False
    truncated: bool = False
    """Output was dropped to respect `max_output`: the head (keep="tail") or the rest (keep="head")."""


@dataclass(frozen=True, slots=True)
class FileStat:
    """The facts about a path the tools need."""

    path: str
    kind: Literal["file", "dir", "other"]
    size: int
    mtime: float


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One entry of a directory listing."""

    name: str
    kind: Literal["file", "dir", "other"]


@runtime_checkable
class Sandbox(Protocol):
    """An environment the agent's tools act on. Relative paths resolve against `cwd`."""

    @property
    def cwd(self) -> str:
        """Absolute working directory."""
        ...

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
        """Run a shell string or an argv list in its own process group; cancellation kills it.

        At most `max_output` bytes of output are kept (None: the adapter's own bound): the last
        ones with `keep="tail"`; with `keep="head"` the first ones, and the command is stopped once
        that many bytes arrived (a search that already has enough matches need not run on).
        """
        ...

    async def read_file(self, path: str) -> bytes:
        """The whole file; raises FileNotFoundError, IsADirectoryError, PermissionError."""
        ...

    def read_chunks(self, path: str, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        """The file as a stream of chunks, so a tool can read a window of a huge file."""
        ...

    async def write_file(self, path: str, data: bytes) -> None:
        """Write the whole file, creating missing parent directories."""
        ...

    async def stat(self, path: str) -> FileStat:
        """Facts about a path; raises FileNotFoundError."""
        ...

    async def list_dir(self, path: str) -> list[DirEntry]:
        """The entries of a directory, sorted by name."""
        ...

    async def realpath(self, path: str) -> str:
        """The absolute, normalised path (symlinks resolved)."""
        ...


@runtime_checkable
class StreamingWrites(Protocol):
    """An optional capability: write a file from a stream of chunks, never holding it whole.

    `write` and `edit` use it for big files where a sandbox has it (`LocalSandbox` does); a
    wrapper around a sandbox (a task's `cwd` view) has it exactly when what it wraps does.
    """

    async def write_chunks(self, path: str, chunks: AsyncIterator[bytes]) -> int:
        """Replace the file with the chunks' bytes (atomically); return the size written."""
        ...
