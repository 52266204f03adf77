"""The `grep` tool: search file contents with `rg`, or `grep -E` where there is none (contract 6).

Whether the sandbox has `rg` is asked once per sandbox and remembered (6.1). Pattern and path go
to the program as argv elements, never through a shell (6.3).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from flue_nb.runtime.redact import redact, secret_values
from flue_nb.runtime.sandbox import Sandbox
from flue_nb.runtime.text import decode
from flue_nb.runtime.tools.read import PathArg, locate, no_nul
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput

__all__ = ["GrepInput", "grep_tool", "has_rg"]

MAX_MATCHES = 100
MAX_LINE_CHARS = 500
# Output kept before the search is stopped: 101 lines of up to ~2 KB each fit, so the cap can
# be detected, and a search matching a whole tree does not run to the end for nothing.
_KEEP = 512 * 1024
_TIMEOUT = 120.0


class GrepInput(BaseModel):
    """Input of `grep`."""

    model_config = ConfigDict(extra="forbid")

    pattern: Annotated[str, AfterValidator(no_nul)] = Field(
        min_length=1,
        max_length=16384,  # argv has a 128 KB per-argument limit; real patterns are far shorter
        description="Regular expression to search for (or plain text with `literal`).",
    )
    path: PathArg = Field(".", description="File or directory to search, relative to the working directory.")
    include: Annotated[str, AfterValidator(no_nul)] | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description="Only search files whose name matches this glob, e.g. `*.py`.",
    )
    literal: bool = Field(False, description="Treat `pattern` as plain text, not a regular expression.")


DESCRIPTION = f"""Search file contents for a regular expression (recursively under `path`). \
Returns `path:line:text` lines, at most {MAX_MATCHES} matches and {MAX_LINE_CHARS} characters per \
line. Use `include` (a file-name glob such as `*.py`) and `path` to narrow the search, and \
`literal` to search for text containing regex characters. Uses ripgrep when available \
(skipping hidden and .gitignored files), else `grep -E`."""


class _Probe:
    """Whether one sandbox has `rg`: asked once, even by concurrent first calls."""

    def __init__(self) -> None:
        self.value: bool | None = None
        self.pending: asyncio.Future[bool] | None = None

    async def get(self, sandbox: Sandbox) -> bool:
        if self.value is not None:
            return self.value
        loop = asyncio.get_running_loop()
        if self.pending is not None and self.pending.get_loop() is loop:
            return await asyncio.shield(self.pending)
        fut: asyncio.Future[bool] = loop.create_future()
        self.pending = fut
        try:
            res = await sandbox.exec(["rg", "--version"], timeout=30, max_output=4096)
            value = res.exit_code == 0 and res.output.startswith(b"ripgrep")
        except Exception:  # noqa: BLE001 - a sandbox that cannot run it has no rg
            value = False
        except BaseException:
            self.pending = None
            fut.cancel()
            raise
        self.value, self.pending = value, None
        fut.set_result(value)
        return value


_probes: weakref.WeakKeyDictionary[Sandbox, _Probe] = weakref.WeakKeyDictionary()


async def has_rg(sandbox: Sandbox, *, fallback: _Probe | None = None) -> bool:
    """Whether `sandbox` can run ripgrep; probed once per sandbox, then cached."""
    try:
        probe = _probes.setdefault(sandbox, _Probe())
    except TypeError:  # not weak-referenceable: the caller's own cache stands in
        probe = fallback or _Probe()
    return await probe.get(sandbox)


def _argv(args: GrepInput, rg: bool) -> list[str]:
    if rg:
        argv = [
            "rg",
            "--no-config",
            "--line-number",
            "--with-filename",
            "--no-heading",
            "--color=never",
        ]
        # Lines past 2 KB come back as a preview: we show 500 characters of them anyway.
        argv += ["--no-messages", "--max-columns=2048", "--max-columns-preview"]
        if args.literal:
            argv.append("--fixed-strings")
        if args.include:
            argv += ["--glob", args.include]
    else:
        # -I skips binary files and -s unreadable ones, as rg does.
        argv = [
            "grep",
            "-r",
            "-n",
            "-H",
            "-I",
            "-s",
            "--color=never",
            "-F" if args.literal else "-E",
        ]
        if args.include:
            argv.append(f"--include={args.include}")
    return [*argv, "-e", args.pattern, "--", args.path]


def _clip(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def grep_tool(sandbox: Sandbox) -> Tool:
    """The `grep` tool on `sandbox`."""
    fallback = _Probe()

    async def run(args: GrepInput, ctx: ToolContext) -> ToolOutput:
        args.path = await locate(sandbox, args.path)
        try:
            st = await sandbox.stat(args.path)
        except FileNotFoundError:
            return ToolOutput(f"Path not found: `{args.path}`.", is_error=True)
        if st.kind == "other":
            # A FIFO or device named directly would be read until it ends: maybe never. (Inside
            # a directory, rg and grep -r skip them.)
            return ToolOutput(
                f"`{args.path}` is not a regular file or directory (a FIFO, socket or device), so "
                "`grep` does not read it. Give a file or a directory to search.",
                is_error=True,
            )
        rg = await has_rg(sandbox, fallback=fallback)
        res = await sandbox.exec(_argv(args, rg), timeout=_TIMEOUT, max_output=_KEEP, keep="head")
        text = decode(res.output)  # a name that is not UTF-8 stays usable: `\xNN` escapes
        if res.timed_out:
            return ToolOutput(
                f"The search timed out after {_TIMEOUT:g} s. Narrow it with `path` or `include`.",
                is_error=True,
            )
        if res.exit_code not in (0, 1) and not res.truncated:
            return ToolOutput(f"Search failed (exit code {res.exit_code}):\n{text.strip()[:2000]}", is_error=True)
        lines = text.split("\n")
        if res.truncated:
            lines.pop()  # the search was stopped mid-line
        lines = [ln for ln in lines if ln]
        if not lines:
            return ToolOutput("No matches found.")
        if args.path in (".", "./"):
            lines = [ln.removeprefix("./") for ln in lines]
        # Redacted before the 500-character clip, which could otherwise keep a secret's prefix.
        pairs = secret_values()
        shown = [_clip(redact(ln, pairs)) for ln in lines[:MAX_MATCHES]]
        out = "\n".join(shown)
        if len(lines) > MAX_MATCHES:
            out += (
                f"\n\n[Showing the first {MAX_MATCHES} matches; there are more. Narrow the search: "
                "a more specific pattern, a `path`, or an `include` glob.]"
            )
        elif res.truncated:
            out += (
                "\n\n[The search output was cut (very long lines); more matches may exist. Narrow "
                "the search: a more specific pattern, a `path`, or an `include` glob.]"
            )
        return ToolOutput(out, details={"engine": "rg" if rg else "grep", "matches": len(shown)})

    return Tool("grep", DESCRIPTION, GrepInput, run, summary_arg="pattern", read_only=True)
