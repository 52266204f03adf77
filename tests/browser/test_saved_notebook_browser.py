"""A saved notebook reads the same without the kernel that ran it, in a real browser (issue 19.1).

The driver (`drive_saved.py`, in `.venv-browser`) runs a `%%flue` cell and a `%flue chat` in
JupyterLab, sends a chat message, saves, shuts the kernel down from the Kernel menu and reopens
the notebook (a new kernel), opens the copy saved while the chat was live, opens it with no
kernel, and reopens it in Notebook 7. The cell and the chat each have the `python` tool draw a
matplotlib figure: every reopened view shows both in their tool card's place (the untrusted
copy, drawn from its markdown, names them). Screenshots of each step stay in the test's tmp dir.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebook"))
from _lab import Lab
from kernel_helpers import _spec_manager, jupyter_env
from test_chat_browser import _notebook, prerequisites  # noqa: F401 - the shared fixture

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]
pytest.importorskip("matplotlib", reason="the runs draw matplotlib figures (the `test` extra has it)")

SETUP = """\
import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
%config FlueMagics.db = 'flue.sqlite'
PLOT = "import matplotlib.pyplot as plt\\nplt.figure(figsize=({}))\\nplt.plot([1, 3, 2])\\nplt.title('{}')"
m = ScriptedModel([
    reply("Checking.", tool_call("bash", command="echo hi from bash"),
          tool_call("python", code=PLOT.format("4, 3", "drawn in the cell"))),
    reply("The answer is **42**."),
    # Wider than the copy's thumbnail: a click on it shows it full size.
    reply("Plotting.", tool_call("python", code=PLOT.format("12, 5", "drawn from the chat"))),
] + [reply("The chat answers: the conversation is kept.")] * 5)
%config FlueMagics.model = 'm'
"""


def test_saved_notebook_is_readable_reopened_with_no_kernel_and_in_notebook7(
    prerequisites: tuple[str, Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser, python = prerequisites
    (tmp_path / "nb").mkdir()
    _spec_manager(tmp_path)
    _notebook(tmp_path / "nb" / "saved.ipynb", [SETUP, "%%flue -c s1\nwhat is it?", "%flue chat -c s1"])
    lab = Lab(python, tmp_path, jupyter_env(tmp_path))
    try:
        args = [str(python), str(Path(__file__).with_name("drive_saved.py")), lab.url, str(tmp_path), browser,
                str(tmp_path / "nb")]  # fmt: skip
        done = subprocess.run(args, check=False, capture_output=True, text=True, timeout=600)
    finally:
        lab.stop()
    report = done.stdout + done.stderr
    (tmp_path / "driver.log").write_text(report)
    assert done.returncode == 0, (
        f"browser steps failed (screenshots in {tmp_path}):\n{report[:5000]}\n"
        f"--- lab.log:\n{(tmp_path / 'lab.log').read_text()[-3000:]}"
    )
    print(report)
