"""The `write` tool: replace a whole file, creating parent directories (contract 3.1)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field

from flue_nb.runtime.effect_capture import FileState, file_effect, file_state, local_root, record_files
from flue_nb.runtime.effects import Bounds
from flue_nb.runtime.sandbox import Sandbox, StreamingWrites
from flue_nb.runtime.tools._locks import PathLocks
from flue_nb.runtime.tools.read import PathArg, locate
from flue_nb.runtime.tools.runs_later import path_runs_later
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput

__all__ = ["WriteInput", "write_tool"]


class WriteInput(BaseModel):
    """Input of `write`."""

    model_config = ConfigDict(extra="forbid")

    path: PathArg = Field(description="File to write, absolute or relative to the working directory.")
    content: str = Field(description="The complete new content of the file.")


DESCRIPTION = """Write a file with the given content, replacing it entirely if it exists and \
creating missing parent directories. To change part of an existing file, prefer `edit`."""


STREAM_CHARS = 8 * 1024 * 1024
"""Content longer than this is written as a stream of 1 Mi-character pieces."""
_PIECE = 1 << 20
_BOUNDS = Bounds()


async def _encoded(content: str) -> AsyncIterator[bytes]:
    for i in range(0, len(content), _PIECE):
        yield content[i : i + _PIECE].encode("utf-8", "surrogatepass")


def write_tool(sandbox: Sandbox, locks: PathLocks) -> Tool:
    """The `write` tool on `sandbox`; takes the per-path lock shared with `edit`."""

    async def run(args: WriteInput, ctx: ToolContext) -> ToolOutput:
        # Big content is encoded and written a piece at a time (one more whole copy is what a
        # 20 MB write costs otherwise), where the sandbox can take a stream.
        stream = sandbox if len(args.content) > STREAM_CHARS and isinstance(sandbox, StreamingWrites) else None
        data = b"" if stream else args.content.encode("utf-8", "surrogatepass")
        # Taken before any await, so same-path calls of a batch queue in dispatch order (4.4).
        async with locks.hold(args.path, cwd=sandbox.cwd):
            args.path = await locate(sandbox, args.path)
            try:
                kind = (await sandbox.stat(args.path)).kind
            except FileNotFoundError:
                kind = "file"
            if kind != "file":  # writing a FIFO would block until someone reads it
                return ToolOutput(f"`{args.path}` is not a regular file; give a file path.", is_error=True)
            # The effect record (issue 34.1): the old content, read under the path's lock.
            root = local_root(sandbox)
            where = os.path.join(root, args.path) if root is not None else None
            before = file_state(where, _BOUNDS, keep=ctx.store is not None) if where else FileState(False)
            if stream is not None:
                size = await stream.write_chunks(args.path, _encoded(args.content))
            else:
                await sandbox.write_file(args.path, data)
                size = len(data)
            details = None
            if where is not None:
                effect, kept = file_effect(
                    where, before, file_state(where, _BOUNDS, keep=False), can_keep=ctx.store is not None
                )
                details = record_files(None, [(effect, kept)] if effect is not None else [], ctx, _BOUNDS)
        return ToolOutput(f"Wrote {size} bytes to `{args.path}`.", details=details)

    return Tool("write", DESCRIPTION, WriteInput, run, summary_arg="path", runs_later=path_runs_later)
