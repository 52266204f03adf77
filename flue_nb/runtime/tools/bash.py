"""The `bash` tool: run a shell command, return the tail of its output (contract 5).

Not synchronised with `write`/`edit` (4.4). The sandbox runs the command in its own process
group, so a timeout kills all it started (5.3) and cancelling the call kills it too (5.5).
"""

from __future__ import annotations

import asyncio
import errno
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flue_nb.runtime.effect_capture import local_root, record_files, scan, store_files, workspace_changes
from flue_nb.runtime.effects import Bounds
from flue_nb.runtime.sandbox import Sandbox
from flue_nb.runtime.text import decode
from flue_nb.runtime.tools.runs_later import shell_runs_later
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput
from flue_nb.runtime.tools.truncate import MAX_BYTES, MAX_LINES, truncate_tail

__all__ = ["BashInput", "bash_tool"]

# The sandbox keeps twice the byte budget: enough for a 50 KB tail of whole lines after the
# (probably partial) first kept line is dropped, without holding a huge output in memory.
_KEEP = 2 * MAX_BYTES
_BOUNDS = Bounds()


class BashInput(BaseModel):
    """Input of `bash`."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="The bash command line to run in the working directory.")
    timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds before the command is killed (exit code 124). Default: no timeout.",
    )


DESCRIPTION = f"""Run a bash command in the working directory and return its combined stdout \
and stderr. Output is cut to the last {MAX_LINES} lines or 50 KB (the tail, where errors and \
results are); for long output, redirect to a file and `read` or `grep` it. A non-zero exit code \
is appended. Set `timeout` (seconds) for commands that may hang: on timeout the command and \
everything it started are killed and the exit code is 124. The environment holds only basic \
variables (no API keys or tokens)."""


def bash_tool(sandbox: Sandbox) -> Tool:
    """The `bash` tool on `sandbox`."""

    async def run(args: BashInput, ctx: ToolContext) -> ToolOutput:
        # The effect record (issue 34.1): a bounded scan of the workspace before and after.
        root = local_root(sandbox)
        can_keep = ctx.store is not None
        skip = store_files(ctx.store)
        seen = await asyncio.to_thread(scan, root, _BOUNDS, read=can_keep, skip=skip) if root is not None else None
        try:
            res = await sandbox.exec(args.command, timeout=args.timeout, max_output=_KEEP, keep="tail")
        except OSError as exc:
            if exc.errno != errno.E2BIG:
                raise
            return ToolOutput(
                f"`command` is too long to run ({len(args.command):,} characters; the system limit "
                "for one argument is 128 KB). Write long scripts to a file with `write`, then run "
                "that file.",
                is_error=True,
            )
        # Bytes that are not UTF-8 come back as `\xNN` (bash's $'\xNN' reads them back).
        text = decode(res.output)
        if res.truncated:
            # The sandbox cut the head at a byte offset: the first line kept is partial.
            text = text.split("\n", 1)[1] if "\n" in text else ""
        cut = truncate_tail(text)
        body = cut.text
        notes: list[str] = []
        if cut.truncated or res.truncated:
            if cut.shown_lines == 0:
                notes.append(
                    "[The last line of output is longer than 50 KB and is not shown; redirect the "
                    "output to a file and inspect it with `read`, `grep` or `tail -c`.]"
                )
            elif res.truncated:
                notes.append(f"[Output truncated: showing the last {cut.shown_lines} lines; earlier output omitted.]")
            else:
                last = cut.first_line + cut.shown_lines - 1
                notes.append(f"[Output truncated: showing lines {cut.first_line}-{last} of {cut.total_lines}.]")
        if res.timed_out:
            notes.append(
                f"[Command timed out after {args.timeout:g} s and was killed with everything it "
                "started. Exit code: 124]"
            )
        elif res.exit_code != 0:
            notes.append(f"[Exit code: {res.exit_code}]")
        body = body.rstrip("\n") or ("" if cut.shown_lines == 0 and (res.truncated or cut.truncated) else "(no output)")
        details: dict[str, Any] | None = {"exit_code": res.exit_code, "timed_out": res.timed_out}
        if seen is not None:
            changes, scan_cut = await asyncio.to_thread(workspace_changes, seen, _BOUNDS, can_keep=can_keep)
            details = record_files(details, changes, ctx, _BOUNDS, scan_cut=scan_cut)
        return ToolOutput("\n\n".join(p for p in [body, *notes] if p), details=details)

    return Tool("bash", DESCRIPTION, BashInput, run, summary_arg="command", runs_later=shell_runs_later)
