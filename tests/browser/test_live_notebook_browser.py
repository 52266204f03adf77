"""The agent fixes a broken cell live in JupyterLab with real-time collaboration (issue 21.7).

JupyterLab with jupyter-collaboration runs from `.venv-live` (built by `_lab.py`); the kernel runs
this venv's Python, finds the server by itself and edits the notebook through its room. In Debian's
Chromium (driven by `drive_live_notebook.py`): a user cell raises `KeyError`, a chat message asks
to fix it, and the scripted agent reads the error with `cell(last_error=true)`, rewrites the cell
with `edit_cell` and runs it with `run_cell`. The page, which nobody else touched, then shows the
fixed source, its new output and execution count: `live-fix.png` in the test's tmp dir.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _lab import LIVE_PACKAGES, LIVE_VENV, prerequisites, run_driver, write_notebook

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(1800)]

SETUP = """\
import re
import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call

FIXED = 'sales = {"north": 120, "south": 95}\\nprint("total:", sales["north"] + sales["south"])'

def fixer_brain(req):
    results = [m for m in req.messages if m.kind == "tool_result"]
    if not results:
        return reply("Let me look at the error.", tool_call("cell", last_error=True))
    last = results[-1]
    if last.name == "cell":
        cell_id = re.search(r"id=([^\\s:]+)", last.content).group(1)
        return reply("The key is misspelt (`nort`); fixing the cell.", tool_call("edit_cell", id=cell_id, source=FIXED))
    if last.name == "edit_cell":
        cell_id = last.details["cell_id"] if last.details else re.search(r"cell (\\S+)", last.content).group(1)
        return reply("Running it.", tool_call("run_cell", id=cell_id))
    return reply("Fixed: the cell read `sales['nort']`; it now reads `sales['north']` and prints the total, 215.")

fixer_model = FunctionModel(fixer_brain, delay=0.02)

@flue.agent
def fixer():
    flue.use_model(fixer_model)
    flue.use_sandbox(flue.kernel(approval="allow"))
    return "Fix the user's notebook."
"""

BROKEN = 'sales = {"north": 120, "south": 95}\nprint("total:", sales["nort"] + sales["south"])'


def _saved_when(path: Path, ok: Callable[[dict[str, Any]], bool], wait: float = 20.0) -> dict[str, Any]:
    """The notebook file once `ok` holds for it (the server saves a moment after a change)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            nb: dict[str, Any] | None = json.loads(path.read_text())
        except json.JSONDecodeError:
            # The collaboration server saves in place: read mid-save, the file was empty.
            nb = None
        if nb is not None and ok(nb):
            return dict(nb)
        if time.monotonic() > deadline:
            assert nb is not None, f"{path} never held a whole notebook within {wait:g} s"
            return dict(nb)
        time.sleep(0.3)


def test_the_agent_fixes_a_broken_cell_live_in_jupyterlab(tmp_path: Path) -> None:
    browser, python = prerequisites(LIVE_VENV, LIVE_PACKAGES)
    (tmp_path / "nb").mkdir()
    write_notebook(tmp_path / "nb" / "fix.ipynb", [SETUP, BROKEN, "%flue chat --agent fixer -c fix"])
    saved: dict[str, Any] = {}

    def read_saved() -> None:  # the server saves a moment after a change: wait while it runs
        saved.update(_saved_when(tmp_path / "nb" / "fix.ipynb", lambda nb: "total: 215" in json.dumps(nb["cells"][1])))

    print(run_driver(python, "drive_live_notebook.py", tmp_path, [browser], before_stop=read_saved))
    # The saved file agrees with the page: the server wrote the agent's edit and outputs to disk.
    fixed = saved["cells"][1]
    assert "".join(fixed["source"]) == BROKEN.replace('"nort"', '"north"')
    assert fixed["metadata"]["flue"]["conversation"]
    assert any("total: 215" in "".join(o.get("text", "")) for o in fixed["outputs"])
