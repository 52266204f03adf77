"""A narrow JupyterLab and Notebook 7: an approved figure is kept and the chat's lines wrap
(issue 33.1, 33.8).

The driver (`drive_narrow.py`, in `.venv-browser`) opens narrow.ipynb in JupyterLab at 600 px
with the file browser open, then narrow7.ipynb in Notebook 7 at 600 px in its dark theme (the
same server); in each it approves a `python` call that draws a plot, and checks the card's
figure, the model's answer and that the title and the gauge line are not cut.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _lab import run_driver, write_notebook
from test_chat_browser import browser_and_python  # noqa: F401 - the shared fixture

pytest.importorskip("matplotlib")
pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]

SETUP = """\
import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call

PLOT = "import matplotlib.pyplot as plt\\nplt.plot([1, 3, 2]); plt.title('approved')"

def brain(req):
    if not any(m.kind == "tool_result" for m in req.messages):
        return reply("Drawing it.", tool_call("python", code=PLOT))
    return reply(f"I saw {len(req.images)} image(s).")

painter_model = FunctionModel(brain, delay=0.02)

@flue.agent
def painter():
    flue.use_model(painter_model)
    flue.use_sandbox(flue.kernel(approval={"python": "ask"}))
    return "Be brief."
"""


def test_an_approved_figure_shows_in_a_narrow_chat_whose_lines_wrap_in_lab_and_notebook7(
    browser_and_python: tuple[str, Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser, python = browser_and_python
    (tmp_path / "nb").mkdir()
    write_notebook(tmp_path / "nb" / "narrow.ipynb", [SETUP, "%flue chat --agent painter -c narrow-chat"])
    write_notebook(tmp_path / "nb" / "narrow7.ipynb", [SETUP, "%flue chat --agent painter -c narrow-seven"])
    print(run_driver(python, "drive_narrow.py", tmp_path, [browser], timeout=600))
