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
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebook"))
from _lab import LIVE_PACKAGES, LIVE_VENV, Lab, Unavailable, browser_venv, chromium
from kernel_helpers import KERNEL_NAME, _spec_manager, jupyter_env

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


def _notebook(path: Path, cells: list[str]) -> None:
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
             "outputs": [], "source": src}
            for i, src in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"name": KERNEL_NAME, "display_name": "flue test", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    path.write_text(json.dumps(nb, indent=1))


def _saved_when(path: Path, ok: Callable[[dict[str, Any]], bool], wait: float = 20.0) -> dict[str, Any]:
    """The notebook file once `ok` holds for it (the server saves a moment after a change)."""
    deadline = time.monotonic() + wait
    while True:
        nb = json.loads(path.read_text())
        if ok(nb) or time.monotonic() > deadline:
            return dict(nb)
        time.sleep(0.3)


@pytest.fixture(scope="module")
def prerequisites() -> tuple[str, Path]:
    try:
        return chromium(), browser_venv(LIVE_VENV, LIVE_PACKAGES)
    except Unavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the live-notebook browser test must run under CI, but: {exc}")
        pytest.skip(f"no real browser or collaborative JupyterLab here: {exc}")


def test_the_agent_fixes_a_broken_cell_live_in_jupyterlab(prerequisites: tuple[str, Path], tmp_path: Path) -> None:
    browser, python = prerequisites
    (tmp_path / "nb").mkdir()
    _spec_manager(tmp_path)  # the kernel: this venv's Python (flue_nb with the live extra)
    _notebook(tmp_path / "nb" / "fix.ipynb", [SETUP, BROKEN, "%flue chat --agent fixer -c fix"])
    lab = Lab(python, tmp_path, jupyter_env(tmp_path))
    try:
        args = [str(python), str(Path(__file__).with_name("drive_live_notebook.py")), lab.url, str(tmp_path), browser]
        done = subprocess.run(args, check=False, capture_output=True, text=True, timeout=900)
        saved = _saved_when(tmp_path / "nb" / "fix.ipynb", lambda nb: "total: 215" in json.dumps(nb["cells"][1]))
    finally:
        lab.stop()
    report = done.stdout + done.stderr
    (tmp_path / "driver.log").write_text(report)
    assert done.returncode == 0, (
        f"browser steps failed (screenshot: {tmp_path / 'failure.png'}, log: driver.log):\n"
        f"{report[:5000]}\n"
        f"--- lab.log:\n{(tmp_path / 'lab.log').read_text()[-3000:]}"
    )
    # The saved file agrees with the page: the server wrote the agent's edit and outputs to disk.
    fixed = saved["cells"][1]
    assert "".join(fixed["source"]) == BROKEN.replace('"nort"', '"north"')
    assert fixed["metadata"]["flue"]["conversation"]
    assert any("total: 215" in "".join(o.get("text", "")) for o in fixed["outputs"])
    print(report)
