"""A saved notebook reads the same without the kernel that ran it, in a real browser (issue 19.1).

The driver (`drive_saved.py`, in `.venv-browser`) runs a `%%flue` cell and a `%flue chat`, sends a
chat message, saves, shuts the kernel down from the Kernel menu and reopens the notebook (a new
kernel; watched while it starts: the chat's copy and no "Loading widget..." above it, issue 33.5),
opens the copy saved while the chat was live (no widget error: only the copy), and opens
it with no kernel; all of it in JupyterLab, then in Notebook 7 (its own copy in `seven/`), which
also opens a copy changed outside Jupyter (untrusted). The cell and the chat each have the
`python` tool draw a matplotlib figure: every reopened view shows both in their tool card's place.
Screenshots of each step stay in the test's tmp dir.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _lab import run_driver, write_notebook
from test_chat_browser import browser_and_python  # noqa: F401 - the shared fixture

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
    browser_and_python: tuple[str, Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser, python = browser_and_python
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "seven").mkdir()  # Notebook 7's copy: its kernel has a store of its own
    for d in (tmp_path / "nb", tmp_path / "nb" / "seven"):
        write_notebook(d / "saved.ipynb", [SETUP, "%%flue -c s1\nwhat is it?", "%flue chat -c s1"])
    print(run_driver(python, "drive_saved.py", tmp_path, [browser, str(tmp_path / "nb")], timeout=600))
