"""An approval asked in one notebook is answered in another's chat, in a real browser (issue 19.3).

The driver (`drive_approve.py`, in `.venv-browser`) opens a.ipynb and b.ipynb in JupyterLab in
two pages: two kernels, one store (the server's working directory), one conversation. A's run
waits for approval of a `bash` call; Approve clicked in B's chat lets it go on.
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
    prerequisites: tuple[str, Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser, python = prerequisites
    (tmp_path / "nb").mkdir()
    _spec_manager(tmp_path)
    for name in ("a", "b"):
        _notebook(tmp_path / "nb" / f"{name}.ipynb", [SETUP, "%flue chat --agent asky -c shared"])
    lab = Lab(python, tmp_path, jupyter_env(tmp_path))
    try:
        args = [str(python), str(Path(__file__).with_name("drive_approve.py")), lab.url, str(tmp_path), browser]
        done = subprocess.run(args, check=False, capture_output=True, text=True, timeout=600)
    finally:
        lab.stop()
    report = done.stdout + done.stderr
    (tmp_path / "driver.log").write_text(report)
    assert done.returncode == 0, (
        f"browser steps failed (screenshots in {tmp_path}):\n{report[:5000]}\n"
        f"--- lab.log:\n{(tmp_path / 'lab.log').read_text()[-3000:]}"
    )
    assert (tmp_path / "nb" / ".flue").is_dir()  # the one store both kernels used
    print(report)
