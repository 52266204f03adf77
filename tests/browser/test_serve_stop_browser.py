"""The chat's Stop on an outside MCP call in a real browser: JupyterLab and Notebook 7 (issue 24.3).

The driver (`drive_serve_stop.py`, in `.venv-browser`) starts `%flue serve` and a `%flue chat`
on its conversation, has the official `mcp` client (this venv) call `python` with a 30 s sleep,
clicks Stop, and checks that the call ended within a few seconds with an error result saying the
user stopped it, and that the user cell run next is untouched. A failure leaves `failure.png`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebook"))
from _lab import Lab, Unavailable, browser_venv, chromium
from kernel_helpers import _spec_manager, jupyter_env
from test_chat_browser import _notebook

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]

CELLS = [
    "%config FlueMagics.db = 'flue.sqlite'\n%flue serve -c outside",
    "%flue chat -c outside",
    "print('user cell untouched', 6 * 7, slept)",
]


def test_chat_stop_ends_an_outside_call_in_jupyterlab_and_notebook7(tmp_path: Path) -> None:
    try:
        browser, python = chromium(), browser_venv()
    except Unavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the browser test must run under CI, but: {exc}")
        pytest.skip(f"no real browser here: {exc}")
    (tmp_path / "nb").mkdir()
    _spec_manager(tmp_path)  # the kernel: this venv's Python (flue_nb, anywidget, mcp)
    for name in ("serve.ipynb", "nb7.ipynb"):
        _notebook(tmp_path / "nb" / name, CELLS)
    lab = Lab(python, tmp_path, jupyter_env(tmp_path))
    try:
        args = [str(python), str(Path(__file__).with_name("drive_serve_stop.py")), lab.url, str(tmp_path), browser]
        env = {**os.environ, "FLUE_MAIN_PYTHON": sys.executable}
        done = subprocess.run(args, check=False, capture_output=True, text=True, timeout=600, env=env)
    finally:
        lab.stop()
    report = done.stdout + done.stderr
    (tmp_path / "driver.log").write_text(report)
    assert done.returncode == 0, (
        f"browser steps failed (screenshot: {tmp_path / 'failure.png'}, log: driver.log):\n{report[:5000]}\n"
        f"--- lab.log:\n{(tmp_path / 'lab.log').read_text()[-3000:]}"
    )
    print(report)
