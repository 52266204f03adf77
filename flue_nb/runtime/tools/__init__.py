"""The six standard sandbox tools, each from a factory any sandbox adapter can reuse.

`standard_tools(sandbox)` is what an agent gets with a sandbox that brings no tools of its own
(contract 1.1). An adapter that adds tools (the kernel's `python`) composes its list from the
same factories, sharing one `PathLocks` between `write` and `edit` (4.4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

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
    "OwnTools",
    "PathLocks",
    "bash_tool",
    "edit_tool",
    "glob_tool",
    "grep_tool",
    "read_tool",
    "standard_tools",
    "tools_of",
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


@runtime_checkable
class OwnTools(Protocol):
    """A sandbox that may bring its own tool list (contract 1.3)."""

    def tools(self) -> Sequence[Tool] | None:
        """The sandbox's own tools, replacing the six; None for the six."""
        ...


def tools_of(sandbox: Sandbox) -> list[Tool]:
    """The sandbox's own tool list where it brings one (1.3), else the six standard tools."""
    own = sandbox.tools() if isinstance(sandbox, OwnTools) else None
    return list(own) if own is not None else standard_tools(sandbox)
