"""The changes panel in a real browser (issue 34.2, 34.8), in JupyterLab and then Notebook 7 on
the same server (flue_nb's live-edit extension loaded, no collaboration): after a chat run that
edited a file, changed a variable and edited a cell of the open notebook, the run ends with the
panel collapsed to one line; opened, it shows the file's and the cell's diffs; one Undo click
puts the cell's old source back in the open tab, another restores the file on disk, and the
panel says so. Saved, the kernel shut down and the notebook reopened, the panel's record reads
as it was left (what was undone marked).

The driver (`drive_changes.py`, in `.venv-browser`) leaves panel-collapsed-*.png, panel-open-*.png,
cell-undone-*.png, panel-undone-*.png and reopened-*.png (`lab`, `nb7`) in the test's tmp dir.
"""

from __future__ import annotations

import json
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
    if done == 2:
        return reply("Reading the notebook.", tool_call("cells", order="document"))
    if done == 3:
        return reply("", tool_call("edit_cell", id="c3", source="print(f'{len(rows)} rows kept')"))
    return reply("Done: the threshold is 20, `rows` keeps the rows above it, and the last cell says how many.")

tidy_model = FunctionModel(brain, delay=0.02)

@flue.agent
def tidy():
    flue.use_model(tidy_model)
    flue.use_sandbox(flue.kernel())
    return "Be brief."
"""

ORIGINAL_FILE = "import pandas as pd\n\nthreshold = 10\nrows = load(threshold)\n"


def test_the_changes_panel_after_a_chat_run_one_undo_click_and_the_saved_record(
    browser_and_python: tuple[str, Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser, python = browser_and_python
    nb = tmp_path / "nb"
    (nb / "seven").mkdir(parents=True)
    for d, conversation in ((nb, "tidy"), (nb / "seven", "tidy7")):
        cells = [SETUP, f"%flue chat --agent tidy -c {conversation}", "rows", "print(len(rows))"]
        write_notebook(d / "review.ipynb", cells)
    print(run_driver(python, "drive_changes.py", tmp_path, [browser], timeout=800, frontend=True))
    for d, tag in ((nb, "lab"), (nb / "seven", "nb7")):
        assert (d / "clean.py").read_text() == ORIGINAL_FILE
        saved = json.loads((d / "review.ipynb").read_text())
        assert "".join(saved["cells"][3]["source"]) == "print(len(rows))"
        # The chat's static copy in the file: the run's panel, what was undone marked.
        copy = "".join(
            "".join(o.get("data", {}).get("text/plain", ""))
            for o in saved["cells"][1]["outputs"]
            if o.get("output_type") in ("display_data", "update_display_data")
        )
        assert "Δ" in copy and "3 changes: 1 cell, 1 file, 1 variable" in copy, copy[-2000:]
        assert "4.1 edit_cell: cell c3: edited" in copy and copy.count("[undone]") == 2, copy[-2000:]
        for shot in ("panel-collapsed", "panel-open", "cell-undone", "panel-undone", "reopened"):
            assert (tmp_path / f"{shot}-{tag}.png").stat().st_size > 0
