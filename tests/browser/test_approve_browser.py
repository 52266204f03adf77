"""An approval asked in one notebook is answered in another's chat, in a real browser (issue 19.3).

The driver (`drive_approve.py`, in `.venv-browser`) opens a.ipynb and b.ipynb in JupyterLab in
two pages: two kernels, one store (the server's working directory), one conversation. A's run
waits for approval of a `bash` call; Approve clicked in B's chat lets it go on.
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

def brain(req):
    if not any(m.kind == "tool_result" for m in req.messages):
        return reply("I need to run a command.", tool_call("bash", command="echo approved-run"))
    return reply("The command ran and printed `approved-run`.")

asky_model = FunctionModel(brain, delay=0.02)

@flue.agent
def asky():
    flue.use_model(asky_model)
    flue.use_sandbox(flue.kernel(approval={"bash": "ask"}))
    return "Be brief."
"""


def test_approve_in_notebook_b_lets_kernel_as_run_continue(
    browser_and_python: tuple[str, Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser, python = browser_and_python
    (tmp_path / "nb").mkdir()
    for name in ("a", "b"):
        write_notebook(tmp_path / "nb" / f"{name}.ipynb", [SETUP, "%flue chat --agent asky -c shared"])
    print(run_driver(python, "drive_approve.py", tmp_path, [browser], timeout=600))
    assert (tmp_path / "nb" / ".flue").is_dir()  # the one store both kernels used
