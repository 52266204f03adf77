"""Dead kernels, joined cells and the stdin prompt in a real browser: JupyterLab and Notebook 7
(issue 19.3, 19.6, 19.8).

The driver (`drive_dead_view.py`, in `.venv-browser`) does in each frontend:
- a `%%flue` cell whose message joins a chat's running response shows that answer;
- the stdin approval prompt of a blocking cell, answered and then interrupted, leaves no box and
  no echo behind;
- SIGSTOP of the kernel: after 20 s without its heartbeat the chat says the kernel is gone and a
  message typed meanwhile goes back into the input; SIGCONT brings the chat back, and the message
  the kernel then takes leaves the input (sent once, answered);
- SIGKILL of the kernel while a chat run works, a `%%flue` cell runs and a message typed in the
  chat waits: the chat and the cell view say the kernel restarted (no "working" with an enabled
  Stop), the waiting message goes back into the input with a "not sent" line, and one typed into
  the dead chat stays there; the next cell recovers the killed cell's run and shows its answer;
  the re-run chat starts with the unsent text in its input;
- a restart from the Kernel menu leaves no chat saying "working".
Screenshots of each step stay in the test's tmp dir.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _lab import run_driver, write_notebook
from test_chat_browser import browser_and_python  # noqa: F401 - the shared fixture

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(1800)]

SETUP = """\
import os
import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call
open("kernel.pid", "w").write(str(os.getpid()))  # the driver kills this kernel

def brain(req):
    msgs = req.messages
    users = [k for k, m in enumerate(msgs) if m.kind == "user"]
    last = msgs[users[-1]].text
    if last not in ("work slowly", "slow cell", "run it", "also this"):
        return reply("echo: " + last)
    first = max(k for k in users if msgs[k].text in ("work slowly", "slow cell", "run it"))
    trigger, after = msgs[first].text, msgs[first + 1:]
    ran = any(m.kind == "tool_result" for m in after)
    if trigger == "work slowly":
        if not ran:
            return reply("Working on it.", tool_call("bash", command="sleep 8; echo slept"))
        return reply("Done. I also saw: " + ", ".join(m.text for m in after if m.kind == "user"))
    if trigger == "slow cell":
        if not ran:
            return reply("Starting the slow part.", tool_call("bash", command="sleep 8; echo slept"))
        return reply("Finished the slow part.")
    if not ran:
        return reply("", tool_call("bash", command="echo ran-after-yes"))
    return reply("The command ran.")

model = FunctionModel(brain, delay=0.02)

@flue.agent
def slowchat():
    flue.use_model(model)
    flue.use_sandbox(flue.kernel(approval="allow"))
    return "Be brief."

@flue.agent
def asker():
    flue.use_model(model)
    flue.use_sandbox(flue.kernel(approval={"bash": "ask"}))
    return "Be brief."
"""


def cells(tag: str) -> list[str]:
    """The cells, in the order `drive_dead_view.py` names them; conversations end in `tag`."""
    return [
        SETUP,
        f"%flue chat --agent slowchat -c dead{tag}",
        f"%%flue --agent slowchat -c cellrec{tag}\nslow cell",
        f"%%flue --agent slowchat -c cellrec{tag}\nand now?",
        f"%flue chat --agent slowchat -c join{tag}",
        f"%%flue --agent slowchat -c join{tag}\nalso this",
        f"%%flue --agent asker -c stdin{tag}\nrun it",
    ]


def test_dead_kernels_joined_cells_and_the_stdin_prompt_in_jupyterlab_and_notebook7(
    browser_and_python: tuple[str, Path],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    browser, python = browser_and_python
    (tmp_path / "nb").mkdir()
    write_notebook(tmp_path / "nb" / "dead.ipynb", cells(""))
    write_notebook(tmp_path / "nb" / "dead7.ipynb", cells("7"))
    print(run_driver(python, "drive_dead_view.py", tmp_path, [browser, str(tmp_path / "nb")], timeout=1500))
