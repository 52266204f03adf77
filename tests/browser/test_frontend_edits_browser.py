"""Live edits in the open tab without real-time collaboration (issue 35), in a real browser.

One Jupyter server from `.venv-browser` (no jupyter-collaboration) with flue_nb's server extension
and labextension installed from the project's own files (`_lab.install_frontend`); the kernels run
this venv's Python. In Chromium (`drive_frontend_edits.py`), in JupyterLab on `fix.ipynb` and then
in Notebook 7 on its copy `seven/fix.ipynb`: from the chat, the scripted agent inserts, edits,
moves, deletes and runs cells of the open notebook, and from a `%%flue` cell inserts and runs one;
while its approved edit waits, the user types into that cell and the edit is refused with their
text intact. Then, through the notebook's kernel: an edit that reaches the page only after the
kernel's timeout is refused by the page, a reload during an edit leaves the saved notebook, the
next edit lands, and with the notebook's tab closed the kernel hears so within the server's probe.
With no browser at all, the kernel's next write says so at once (`before_stop`). Screenshots:
`frontend-*-lab.png`, `frontend-*-nb7.png` in the test's tmp dir.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _lab import run_driver, run_in_server_kernel, write_notebook
from test_chat_browser import browser_and_python  # noqa: F401 - the shared fixture

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(1200)]

SETUP = """\
import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call

PLANS = {
    "insert": [tool_call("insert_cell", source="z = 3", after="c1")],
    "edit": [tool_call("cells", order="document"), tool_call("edit_cell", id="c1", source="x = 10")],
    "move": [tool_call("move_cell", id="c2")],
    "delete": [tool_call("cells", order="document"), tool_call("delete_cell", id="c4")],
    "run": [tool_call("run_cell", id="c1")],
    "race": [tool_call("cells", order="document"), tool_call("edit_cell", id="c2", source="y = 20")],
    # From the %%flue cell: insert at the end, then run what was inserted (its id from the result).
    "cellwork": [tool_call("insert_cell", source="v = 5\\nv * 2"),
                 lambda last: tool_call("run_cell", id=last.details["cell_id"])],
}

def brain(req):
    asked = [m for m in req.messages if m.kind == "user"][-1].text.split()[0]
    done, last = 0, None
    for m in reversed(req.messages):
        if m.kind == "user":
            break
        if m.kind == "tool_result":
            done, last = done + 1, last or m
    plan = PLANS[asked]
    if done < len(plan):
        call = plan[done] if not callable(plan[done]) else plan[done](last)
        return reply(f"step {done + 1} of {asked}", call)
    return reply(f"{asked}: done")

editor_model = FunctionModel(brain, delay=0.02)

@flue.agent
def editor():
    flue.use_model(editor_model)
    flue.use_sandbox(flue.kernel(approval={"edit_cell": "ask"}))
    return "Edit the notebook."
"""

CLOSED = """\
import asyncio, json, time
from flue_nb.notebook.document.frontend import NotReached, connect
doc = connect(timeout=5)
t = time.monotonic()
try:
    await doc.insert_cell("never = 1")
    out = {"written": True}
except NotReached as exc:
    out = {"written": False, "reach": exc.reach, "message": str(exc)}
out["seconds"] = time.monotonic() - t
print("RESULT" + json.dumps(out))
"""
CELLS = [
    SETUP,
    "x = 1",
    "y = 2",
    "%flue chat --agent editor -c e",
    "w = 4",
    "%%flue --agent editor -c cellrun\ncellwork",
]


def _run_in_kernel(tmp_path: Path, code: str) -> str:
    return run_in_server_kernel(tmp_path / "runtime", code)


def test_the_agent_edits_the_open_tab_without_collaboration(
    browser_and_python: tuple[str, Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser, python = browser_and_python
    (tmp_path / "nb" / "seven").mkdir(parents=True)
    write_notebook(tmp_path / "nb" / "fix.ipynb", CELLS)
    write_notebook(tmp_path / "nb" / "seven" / "fix.ipynb", CELLS)
    closed: dict[str, object] = {}

    def with_no_tab() -> None:
        out = _run_in_kernel(tmp_path, CLOSED)
        closed.update(json.loads(out.split("RESULT", 1)[1]))

    print(run_driver(python, "drive_frontend_edits.py", tmp_path, [browser], before_stop=with_no_tab, frontend=True))
    # The browser is gone: the write says so, and says it at once (no tab to wait for).
    assert closed["written"] is False, closed
    assert closed["reach"] == "no_front_end", closed
    assert "no front end is connected" in str(closed["message"])
    # Each page saved its notebook: the agent's cells, with their provenance; the user's text.
    for path in ("fix.ipynb", "seven/fix.ipynb"):
        saved = json.loads((tmp_path / "nb" / path).read_text())
        sources = ["".join(c["source"]) for c in saved["cells"]]
        # `y = 2` moved to the top; `z = 3` inserted below `x`; `w = 4` deleted; the %%flue cell's
        # cell at the end; `x` edited to 10 from the chat, then to 11 after the reload.
        assert sources[0] == "y = 2  # mine" and sources[2:4] == ["x = 11", "z = 3"], (path, sources)
        assert "w = 4" not in sources and "never = 1" not in sources and "x = 99" not in sources, (path, sources)
        assert sources[-1] == "v = 5\nv * 2", (path, sources)
        edited = next(c for c in saved["cells"] if "".join(c["source"]) == "x = 11")
        assert edited["metadata"]["flue"]["conversation"] == "e", edited  # the chat's edit's provenance
        ran = saved["cells"][-1]
        assert ran["metadata"]["flue"]["conversation"] == "cellrun" and ran["execution_count"], ran
        assert any("10" in json.dumps(o) for o in ran["outputs"]), ran
