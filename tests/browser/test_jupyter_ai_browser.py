"""flue_nb as a persona of jupyter-ai's chat (issue 38), in a real Jupyter server and Chromium.

`.venv-jupyter-ai` is built from the package index: jupyter-ai 3.x (with jupyter-ai-acp-client,
which hosts ACP agents as personas), Playwright, and flue_nb from this checkout (`pip install -e`,
no extras: its `jupyter_ai.personas` entry point is what jupyter-ai loads). flue_nb's ACP extra
cannot go there: jupyter-ai 3.2 pins `mcp<2` and `agent-client-protocol<0.12`, flue_nb[acp] needs
`mcp>=2` and `agent-client-protocol>=0.12.1`. So, as a user would have it, the notebook's kernel runs
another environment, this venv's (flue_nb with its extras), and the persona runs `flue-nb acp` with
the kernel's Python. The model is offline (`FLUE_MODEL=acp_models:model` in the server's
environment, which the agent inherits).

In Chromium (`drive_jupyter_ai.py`): `analysis.chat` is opened with no kernel running, flue_nb
picked and asked, and it says there is no notebook kernel to work in; then `analysis.ipynb` beside
it is opened and run, and asked again flue_nb computes something in the kernel: jupyter-ai shows
flue_nb's permission request on the call's card, the driver approves it, and the answer appears.
Then, while the server runs: the variable the call set is in the notebook's kernel; after it: the
turn is the notebook's own conversation in the kernel's store. Screenshots: `jupyter-ai-no-kernel.png`,
`jupyter-ai-ask.png` and `jupyter-ai-answer.png` in the test's tmp dir.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _lab import (
    JUPYTER_AI_PACKAGES,
    JUPYTER_AI_VENV,
    ROOT,
    prerequisites,
    run_driver,
    run_in_server_kernel,
    write_notebook,
)

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(2400)]

MESSAGE = "compute it in the kernel"
ANSWER = "The kernel ran it: 42"  # tests/acp_models.py's answer once `answer = 6 * 7` ran


def _kernel_says(tmp_path: Path, code: str) -> str:
    return run_in_server_kernel(tmp_path / "runtime", code, only=True)


def test_a_message_to_the_flue_nb_persona_runs_in_the_notebooks_kernel(tmp_path: Path) -> None:
    browser, python = prerequisites(JUPYTER_AI_VENV, JUPYTER_AI_PACKAGES)
    nb = tmp_path / "nb"
    nb.mkdir()
    write_notebook(nb / "analysis.ipynb", ["x = 1"])
    (nb / "analysis.chat").write_text("")  # a new chat, as jupyterlab-chat makes one
    server_env = {"FLUE_MODEL": "acp_models:model", "PYTHONPATH": str(ROOT / "tests")}
    seen: dict[str, str] = {}

    def in_the_kernel() -> None:
        seen["answer"] = _kernel_says(tmp_path, "print(answer, x)").strip()

    report = run_driver(python, "drive_jupyter_ai.py", tmp_path, [browser, MESSAGE, ANSWER],
                        before_stop=in_the_kernel, server_env=server_env)  # fmt: skip
    print(report)
    # The call ran in the notebook's own kernel: its namespace has the user's `x` and flue's `answer`.
    assert seen["answer"] == "42 1", seen
    # The chat shows the user's messages, the missing kernel said plainly, then flue_nb's answer
    # (the driver saved the panel's text).
    chat = (tmp_path / "chat.txt").read_text()
    assert chat.count(MESSAGE) == 2 and "no notebook has a running kernel" in chat and ANSWER in chat, chat
    assert chat.index("no notebook has a running kernel") < chat.index(ANSWER), chat
    # The turn is the notebook's own conversation in the kernel's store, settled as completed (the
    # first message never reached flue_nb: there was no kernel to work in).
    from flue_nb.notebook.document.identity import default_conversation_id
    from flue_nb.runtime.session import open_conversation

    conversation = default_conversation_id({"JPY_SESSION_NAME": str(nb / "analysis.ipynb")})
    stored = open_conversation(conversation, db=str(nb / ".flue" / "flue.sqlite"))
    assert [(s.text, s.outcome.value if s.outcome else None) for s in stored.submissions()] == [(MESSAGE, "completed")]
    # jupyter-ai kept the session id (the conversation) with the chat, for the next time it opens.
    saved = json.loads((nb / "analysis.chat").read_text() or "{}")
    assert conversation in json.dumps(saved.get("metadata", {})), saved.get("metadata")
