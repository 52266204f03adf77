"""The notebook tools the kernel sandbox offers (read and write), and their word in the system prompt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flue_nb.notebook.document.runner import Runner
from flue_nb.notebook.kernel._envelope import ENVELOPE_PROMPT
from flue_nb.runtime.tools.tool import Tool

__all__ = ["NOTEBOOK_TOOLS", "PROMPT_NOTES", "notebook_tools"]

NOTEBOOK_TOOLS = ("cells", "cell", "variables", "insert_cell", "edit_cell", "run_cell")
"""The notebook tools' names, in the order the kernel sandbox lists them."""

PROMPT_NOTES = (
    "## The notebook\n"
    "You see the user's notebook through these tools: `cells` (the cells in the order they ran in "
    'this kernel, or `order="document"`), `cell` (one cell whole, e.g. `last_error=true` for the '
    'error the user means by "the error above"), `variables` (the user\'s namespace), '
    "`insert_cell`, `edit_cell` and `run_cell` (write and run cells; each result says whether it "
    "reached the notebook document). Look before you guess what the user ran.\n" + ENVELOPE_PROMPT
)
"""What the kernel sandbox adds to the system prompt."""


def notebook_tools(
    namespace: Callable[[], dict[str, Any]], *, runner: Runner, workspace: str | None = None
) -> list[Tool]:
    """The six notebook tools on a namespace; `runner` runs code where the namespace lives;
    `run_cell` records the files it changes in `workspace` (as `python` does)."""
    from flue_nb.notebook.kernel.read_tools import NotebookContext, read_tools
    from flue_nb.notebook.kernel.write_tools import write_tools

    nb = NotebookContext(namespace, runner, workspace=workspace)
    return [*read_tools(nb), *write_tools(nb)]
