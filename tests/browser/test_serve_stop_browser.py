"""The chat's Stop on an outside MCP call in a real browser: JupyterLab and Notebook 7 (issue 24.3).

The driver (`drive_serve_stop.py`, in `.venv-browser`) starts `%flue serve` and a `%flue chat`
on its conversation, has the official `mcp` client (this venv) call `python` with a 30 s sleep,
clicks Stop, and checks that the call ended within a few seconds with an error result saying the
user stopped it, and that the user cell run next is untouched. A failure leaves `failure.png`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _lab import prerequisites, run_driver, write_notebook

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]

CELLS = [
    "%config FlueMagics.db = 'flue.sqlite'\n%flue serve -c outside",
    "%flue chat -c outside",
    "print('user cell untouched', 6 * 7, slept)",
]


def test_chat_stop_ends_an_outside_call_in_jupyterlab_and_notebook7(tmp_path: Path) -> None:
    browser, python = prerequisites()
    (tmp_path / "nb").mkdir()
    for name in ("serve.ipynb", "nb7.ipynb"):
        write_notebook(tmp_path / "nb" / name, CELLS)
    env = {"FLUE_MAIN_PYTHON": sys.executable}  # the mcp client runs in this venv
    print(run_driver(python, "drive_serve_stop.py", tmp_path, [browser], timeout=600, env=env))
