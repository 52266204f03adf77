"""Another ACP agent in the flue chat, in a real browser (issue 38.3): the scripted agent never
asks permission, and its calls into the kernel still pass flue_nb's approval — asked on their
cards (Approve clicked in JupyterLab), or refused when the agent reported them to no one. The
driver (`drive_acp_host.py`, in `.venv-browser`) leaves screenshots in the test's tmp dir."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from _lab import run_driver, write_notebook
from test_chat_browser import browser_and_python  # noqa: F401 - the shared fixture

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]
pytest.importorskip("acp", reason="hosting an ACP agent needs the `acp` extra")

SCRIPTED = Path(__file__).resolve().parents[1] / "acp_scripted_agent.py"


def test_an_agents_calls_into_the_kernel_are_approved_on_their_cards(
    browser_and_python: tuple[str, Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser, python = browser_and_python
    (tmp_path / "nb").mkdir()
    spec = "acp:" + shlex.join([sys.executable, str(SCRIPTED)])
    write_notebook(
        tmp_path / "nb" / "host.ipynb",
        ["%load_ext flue_nb\n%config FlueMagics.db = 'flue.sqlite'", f"%flue chat --agent {json.dumps(spec)}"],
    )
    print(run_driver(python, "drive_acp_host.py", tmp_path, [browser], timeout=600))
