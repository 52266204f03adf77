"""The `write` tool: replace a whole file, creating parent directories (contract 3.1)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from flue_nb.runtime.sandbox import Sandbox
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput
from flue_nb.runtime.tools._locks import PathLocks
from flue_nb.runtime.tools.read import PathArg, locate

__all__ = ["WriteInput", "write_tool"]


class WriteInput(BaseModel):
    """Input of `write`."""

    model_config = ConfigDict(extra="forbid")

    path: PathArg = Field(
        description="File to write, absolute or relative to the working directory."
    )
    content: str = Field(description="The complete new content of the file.")


DESCRIPTION = """Write a file with the given content, replacing it entirely if it exists and \
creating missing parent directories. To change part of an existing file, prefer `edit`."""


def write_tool(sandbox: Sandbox, locks: PathLocks) -> Tool:
    """The `write` tool on `sandbox`; takes the per-path lock shared with `edit`."""

    async def run(args: WriteInput, ctx: ToolContext) -> ToolOutput:
        data = args.content.encode("utf-8", "surrogatepass")
        # Taken before any await, so same-path calls of a batch queue in dispatch order (4.4).
        async with locks.hold(args.path, cwd=sandbox.cwd):
            args.path = await locate(sandbox, args.path)
            try:
                kind = (await sandbox.stat(args.path)).kind
            except FileNotFoundError:
                kind = "file"
            if kind != "file":  # writing a FIFO would block until someone reads it
                return ToolOutput(
                    f"`{args.path}` is not a regular file; give a file path.", is_error=True
                )
            await sandbox.write_file(args.path, data)
        return ToolOutput(f"Wrote {len(data)} bytes to `{args.path}`.")

    return Tool("write", DESCRIPTION, WriteInput, run)  # type: ignore[arg-type]
