"""The `glob` tool: find files by name, with `find -name` semantics (contract 7).

The pattern matches file names, not paths: `*.py` matches at any depth and `src/*.py` matches
nothing. Regular files only. The pattern and path reach `find` as argv elements.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from flue_nb.runtime.sandbox import Sandbox
from flue_nb.runtime.text import decode
from flue_nb.runtime.tools.read import PathArg, locate, no_nul
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput

__all__ = ["GlobInput", "glob_tool"]

MAX_PATHS = 1000
_KEEP = 4 * 1024 * 1024  # 1001 paths of up to 4 KB (PATH_MAX) fit: enough to see the cap
_TIMEOUT = 120.0
# `find`'s own complaints (unreadable directories) would mix into the NUL-separated list on the
# combined output stream, so they go to /dev/null; "$@" passes the arguments through unexpanded.
_SCRIPT = 'find "$@" 2>/dev/null'


class GlobInput(BaseModel):
    """Input of `glob`."""

    model_config = ConfigDict(extra="forbid")

    pattern: Annotated[str, AfterValidator(no_nul)] = Field(
        min_length=1,
        max_length=1024,
        description="File-name pattern such as `*.py` or `test_*.py` (names only, no `/`).",
    )
    path: PathArg = Field(".", description="Directory to search under, relative to the working directory.")


DESCRIPTION = f"""Find files by name under `path`, recursively, like `find PATH -name PATTERN`. \
The pattern matches file names only, never directories in the path: `*.py` finds Python files \
at any depth; to search one directory, set `path` instead of writing `src/*.py`. Returns up to \
{MAX_PATHS} sorted paths of regular files."""


def glob_tool(sandbox: Sandbox) -> Tool:
    """The `glob` tool on `sandbox`."""

    async def run(args: GlobInput, ctx: ToolContext) -> ToolOutput:
        args.path = await locate(sandbox, args.path)
        try:
            await sandbox.stat(args.path)
        except FileNotFoundError:
            return ToolOutput(f"Path not found: `{args.path}`.", is_error=True)
        if "/" in args.pattern:
            # find -name never matches a name containing "/": say why nothing was found.
            return ToolOutput(
                "No files found: the pattern matches file names only, and "
                f"`{args.pattern}` contains "
                "`/`. Put the directory in `path` and the name pattern in `pattern`."
            )
        # A path starting with "-" would be read as a find option.
        start = "./" + args.path if args.path.startswith("-") else args.path
        argv = [
            "bash",
            "-c",
            _SCRIPT,
            "find",
            start,
            "-type",
            "f",
            "-name",
            args.pattern,
            "-print0",
        ]
        res = await sandbox.exec(argv, timeout=_TIMEOUT, max_output=_KEEP, keep="head")
        if res.timed_out:
            return ToolOutput(f"The search timed out after {_TIMEOUT:g} s. Narrow `path`.", is_error=True)
        # A name that is not UTF-8 comes back with `\xNN` escapes the file tools accept.
        names = decode(res.output).split("\x00")
        names.pop()  # after the last NUL: empty, or a name cut short when find was stopped
        if args.path in (".", "./"):
            names = [n.removeprefix("./") for n in names]
        if not names:
            return ToolOutput("No files found.")
        names.sort()
        out = "\n".join(names[:MAX_PATHS])
        if len(names) > MAX_PATHS or res.truncated:
            out += (
                f"\n\n[Showing {MAX_PATHS} paths; there are more. Narrow the search with a more "
                "specific pattern or a deeper `path`.]"
            )
        return ToolOutput(out, details={"count": min(len(names), MAX_PATHS)})

    return Tool("glob", DESCRIPTION, GlobInput, run, summary_arg="pattern", read_only=True)
