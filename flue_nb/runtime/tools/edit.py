"""The `edit` tool: replace exact text in a file, under the per-path lock (contract 4)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from flue_nb.runtime.sandbox import Sandbox
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput
from flue_nb.runtime.tools._locks import PathLocks
from flue_nb.runtime.tools.read import PathArg, locate

__all__ = ["EditInput", "edit_tool"]


class EditInput(BaseModel):
    """Input of `edit`."""

    model_config = ConfigDict(extra="forbid")

    path: PathArg = Field(
        description="File to edit, absolute or relative to the working directory."
    )
    old_text: str = Field(
        description="Exact text to find, including whitespace and indentation. Without "
        "`replace_all` it must occur exactly once: include enough surrounding lines to make "
        "it unique."
    )
    new_text: str = Field(description="Text to put in its place (taken literally).")
    replace_all: bool = Field(False, description="Replace every occurrence instead of exactly one.")


DESCRIPTION = """Edit a file by replacing exact text. `old_text` must match the file exactly \
(whitespace and indentation included) and, unless `replace_all` is true, exactly once; the \
replacement is literal. Read the file first. To create or fully rewrite a file, use `write`."""


def _error(text: str) -> ToolOutput:
    return ToolOutput(text, is_error=True)


def edit_tool(sandbox: Sandbox, locks: PathLocks) -> Tool:
    """The `edit` tool on `sandbox`; takes the per-path lock shared with `write`."""

    async def run(args: EditInput, ctx: ToolContext) -> ToolOutput:
        if not args.old_text:
            return _error(
                "`old_text` is empty; give the exact text to replace (use `write` for a new file)."
            )
        # Taken before any await, so same-path calls of a batch queue in dispatch order (4.4):
        # a later edit then reads what the earlier one wrote.
        async with locks.hold(args.path, cwd=sandbox.cwd):
            args.path = await locate(sandbox, args.path)
            try:
                st = await sandbox.stat(args.path)
            except FileNotFoundError:
                return _error(f"File not found: `{args.path}`. Use `write` to create a file.")
            if st.kind != "file":  # a directory, FIFO or device: reading it fails or blocks
                return _error(f"`{args.path}` is not a regular file.")
            raw = await sandbox.read_file(args.path)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                return _error(f"`{args.path}` is not UTF-8 text; `edit` cannot change it safely.")
            count = text.count(args.old_text)
            if count == 0:
                return _error(
                    f"Could not find `old_text` in `{args.path}`. It must match exactly, including "
                    "whitespace and indentation; read the file again and copy the text exactly."
                    + (
                        " (`old_text` is longer than the whole file.)"
                        if len(args.old_text) > len(text)
                        else ""
                    )
                    + (" Nothing was replaced." if args.replace_all else "")
                )
            if count > 1 and not args.replace_all:
                return _error(
                    f"`old_text` matches {count} places in `{args.path}`; it must match exactly "
                    "one. "
                    "Include more surrounding context to make it unique, or set `replace_all` to "
                    "replace every occurrence."
                )
            new = text.replace(args.old_text, args.new_text)
            await sandbox.write_file(args.path, new.encode("utf-8", "surrogatepass"))
        noun = "occurrence" if count == 1 else "occurrences"
        return ToolOutput(f"Edited `{args.path}`: replaced {count} {noun}.")

    return Tool("edit", DESCRIPTION, EditInput, run)  # type: ignore[arg-type]
