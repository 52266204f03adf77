"""The six standard sandbox tools, each from a factory any sandbox adapter can reuse.

`standard_tools(sandbox)` is what an agent gets with a sandbox that brings no tools of its own
(contract 1.1). An adapter that adds tools (the kernel's `python`) composes its list from the
same factories, sharing one `PathLocks` between `write` and `edit` (4.4).
"""

from __future__ import annotations

from flue_nb.runtime.sandbox import Sandbox
from flue_nb.runtime.tools._locks import PathLocks
from flue_nb.runtime.tools.bash import bash_tool
from flue_nb.runtime.tools.edit import edit_tool
from flue_nb.runtime.tools.glob import glob_tool
from flue_nb.runtime.tools.grep import grep_tool
from flue_nb.runtime.tools.read import read_tool
from flue_nb.runtime.tools.tool import Tool
from flue_nb.runtime.tools.write import write_tool

__all__ = [
    "PathLocks",
    "bash_tool",
    "edit_tool",
    "glob_tool",
    "grep_tool",
    "read_tool",
    "standard_tools",
    "write_tool",
]


def standard_tools(sandbox: Sandbox) -> list[Tool]:
    """`read`, `write`, `edit`, `bash`, `grep`, `glob` on `sandbox`, in that order."""
    locks = PathLocks()
    return [
        read_tool(sandbox),
        write_tool(sandbox, locks),
        edit_tool(sandbox, locks),
        bash_tool(sandbox),
        grep_tool(sandbox),
        glob_tool(sandbox),
    ]
