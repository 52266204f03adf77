"""The changes panel in a real browser (issue 34.2): JupyterLab's chat, after a run that edited
a file and changed a variable, ends with the panel collapsed to one line; opened, it shows the
file's diff; one Undo click restores the file on disk and the panel says so.

The driver (`drive_changes.py`, in `.venv-browser`) leaves panel-collapsed.png, panel-open.png
and panel-undone.png in the test's tmp dir.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _lab import run_driver, write_notebook
from test_chat_browser import browser_and_python  # noqa: F401 - the shared fixture

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]

SETUP = """\
import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call

open("clean.py", "w").write("import pandas as pd\\n\\nthreshold = 10\\nrows = load(threshold)\\n")
rows = [5, 12, 30]

def brain(req):
    done = sum(m.kind == "tool_result" for m in req.messages)
    if done == 0:
        return reply("Raising the threshold.", tool_call("edit", path="clean.py", old_text="threshold = 10",
                                                         new_text="threshold = 20  # stricter"))
    if done == 1:
        return reply("", tool_call("python", code="rows = [r for r in rows if r > 20]"))
    return reply("Done: the threshold is 20 and `rows` keeps the rows above it.")

tidy_model = FunctionModel(brain, delay=0.02)

@flue.agent
def tidy():
    flue.use_model(tidy_model)
    flue.use_sandbox(flue.kernel())
    return "Be brief."
"""


def test_the_changes_panel_after_a_chat_run_and_one_undo_click(
    browser_and_python: tuple[str, Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser, python = browser_and_python
    (tmp_path / "nb").mkdir()
    write_notebook(tmp_path / "nb" / "review.ipynb", [SETUP, "%flue chat --agent tidy -c tidy", "rows"])
    print(run_driver(python, "drive_changes.py", tmp_path, [browser], timeout=600))
    restored = (tmp_path / "nb" / "clean.py").read_text()
    assert restored == "import pandas as pd\n\nthreshold = 10\nrows = load(threshold)\n"
    for shot in ("panel-collapsed.png", "panel-open.png", "panel-undone.png"):
        assert (tmp_path / shot).stat().st_size > 0
