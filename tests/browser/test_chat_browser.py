"""The chat widget in a real browser: JupyterLab and Notebook 7 in Debian's Chromium.

The driver (`drive_chat.py`, run with `.venv-browser`'s Playwright) runs a `%%flue` cell whose
offline model streams text and calls `bash` and `python`; opens `%flue chat`, sends a message
while the agent works and sees it join; presses Stop on a long run and sees `aborted`; clicks
Approve on an `ask` card and sees the tool run; reloads the page and sees the history redrawn;
then does all of it again in Notebook 7 (a copy of the notebook in `seven/`, so its kernel has a
store of its own), and there opens a fresh chat at a 600 px width. A failure leaves
`failure.png` in the test's tmp dir.

Set `FLUE_README_SCREENSHOT=1` to refresh `docs/chat-widget.png` (the README's screenshot).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _lab import ROOT, prerequisites, run_driver, write_notebook

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(1800)]

SETUP = """\
import flue_nb as flue
from flue_nb.models import ScriptedModel, FunctionModel, fail, reply, tool_call

cell_model = ScriptedModel([
    reply("Let me check with both tools.", tool_call("bash", command="echo hello from bash"),
          tool_call("python", code="__import__('time').sleep(5); answer = 6 * 7")),
    reply("### Result\\nThe answer is **42**, computed with `python`."),
], delay=0.02)

TRIGGERS = ("work slowly", "long one", "approve me")

def brain(req):
    msgs = req.messages
    i = max(k for k, m in enumerate(msgs) if m.kind == "user" and m.text in TRIGGERS)
    trigger, after = msgs[i].text, msgs[i + 1:]
    ran = any(m.kind == "tool_result" for m in after)
    if trigger == "work slowly":
        if not ran:
            return reply("Loading the table and checking its columns first; this takes a moment.",
                         tool_call("python", code="import time; time.sleep(4); rows = [3, 1, 2]"))
        joined = [m.text for m in after if m.kind == "user"]
        return reply("Finished. I also saw: " + ", ".join(joined), usage=(2400, 60))
    if trigger == "long one":
        return reply(" ".join(f"long{k}" for k in range(5000)))
    if not ran:
        return reply("I need to run a command.", tool_call("bash", command="echo approved-run"))
    return reply("The command ran and printed `approved-run`.", usage=(3100, 40))

chat_model = FunctionModel(brain, delay=0.05)

@flue.agent
def helper():
    flue.use_model(cell_model)
    flue.use_sandbox(flue.kernel())
    return "Be brief."

@flue.agent
def chatty():
    flue.use_model(chat_model)
    flue.use_sandbox(flue.kernel(approval={"bash": "ask", "python": "allow"}))
    return "Be brief."
"""

# Every other kind of part, in one conversation: thinking, a long result, a subagent, a
# compaction, a signal, a failure.
GALLERY = '''\
open("big.txt", "w").write("".join(f"row {i}: value {i * 7}\\n" for i in range(400)))
reviewer_model = ScriptedModel([reply("The numbers add up.")])

@flue.agent
def reviewer():
    flue.use_model(reviewer_model)
    return "Review."

@flue.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key}=1"

mounted = {"on": False}
ALPHA = ("alpha is **1**. What I checked:\\n\\n- `lookup` was mounted for this message, so I asked it\\n"
         "- it answered `alpha=1`, a plain integer\\n- big.txt has no row named alpha\\n"
         "- the reviewer's totals do not depend on it")
gal_model = ScriptedModel([
    reply("I'll read the file.", tool_call("read", path="big.txt"),
          thinking="The user wants the file summarised; read it first."),
    reply("", tool_call("task", agent="reviewer", description="check the totals",
                        prompt="Check the totals in big.txt")),
    reply("The file has **400 rows**; the reviewer agrees."),
    reply("", tool_call("lookup", key="alpha")),
    reply(ALPHA),
    fail("invalid_request", "the request was malformed"),
], summary="## Goal\\nSummarise big.txt\\n## Progress\\n- read 400 rows", delay=0.01)

@flue.agent
def gal():
    flue.use_model(gal_model, compaction=flue.CompactionConfig(keep_recent_tokens=100))
    flue.use_sandbox(flue.local())
    flue.use_subagent(flue.define_subagent("reviewer", "Checks numbers", agent=reviewer))
    if mounted["on"]:
        flue.use_tool(lookup)
    return "Be brief."
'''

GALLERY_RUN = """\
s = flue.init(gal, conversation="gallery")
s.prompt("Summarise big.txt")
mounted["on"] = True
s.prompt("What is alpha?")
s.compact()
try:
    s.prompt("And now?")
except flue.FlueError as exc:
    print("failed as scripted:", exc)
"""


# Reading (19.4, 19.5): a figure in a tool card, markdown a person reads, a denied call.
RICH = r'''\
RICH_TEXT = """Here is the plot and a summary.

| region | units |
|---|---:|
| north | 120 |
| south | 95 |

- growth
  - north: *fast*
  - south: slow
- see [the docs](https://docs.example.test/docs)

```python
def growth(a, b):
    return (b - a) / a
```

Euler: $e^{i\\pi} + 1 = 0$ <img src=x onerror="window.pwned = 1">"""
rich_model = ScriptedModel([
    reply("Plotting.", tool_call("python", code="import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])")),
    reply(RICH_TEXT),
    reply("", tool_call("bash", command="rm -rf scratch")),
    reply("Not run, as you said."),
], delay=0.01)

@flue.agent
def richy():
    flue.use_model(rich_model)
    flue.use_sandbox(flue.kernel(approval={"bash": "ask", "python": "allow"}))
    return "Be brief."
'''


# A long conversation (19.5): a chat opened on it starts at the newest message.
LONG = """\
many_model = FunctionModel(lambda req: reply(f"Answer {len(req.messages)}: " + "words " * 30))

@flue.agent
def many():
    flue.use_model(many_model)
    return "Be brief."

ms = flue.init(many, conversation="many")
for i in range(40):
    ms.prompt(f"question {i}")
"""


CELLS = [
    SETUP,
    "%%flue --agent helper -c cellrun\nWhat is six times seven?",
    "%flue chat --agent chatty -c talk",
    "%flue chat --agent chatty -c talk",
    "%%flue --agent chatty -c longcell\nlong one",
    GALLERY,
    "%flue chat --agent gal -c gallery",
    GALLERY_RUN,
    RICH,
    "%flue chat --agent richy -c rich",
    "import time; time.sleep(8)",
    LONG,
    "%flue chat --agent many -c many",
    'ms.prompt("one more")',
]


@pytest.fixture(scope="module")
def browser_and_python() -> tuple[str, Path]:
    return prerequisites()


def test_chat_widget_in_jupyterlab_and_notebook7(browser_and_python: tuple[str, Path], tmp_path: Path) -> None:
    browser, python = browser_and_python
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "seven").mkdir()
    write_notebook(tmp_path / "nb" / "chat.ipynb", CELLS)
    write_notebook(tmp_path / "nb" / "seven" / "chat.ipynb", CELLS)  # Notebook 7's, with its own store
    write_notebook(tmp_path / "nb" / "nb7.ipynb", [
        SETUP,
        "%%flue --agent helper -c nb7cell\nWhat is six times seven?",
        "%flue chat --agent chatty -c nb7talk",
        "flue.chat(model='anthropic/claude-sonnet-4-6', conversation='nb7fresh')",
    ])  # fmt: skip
    readme = ROOT / "docs" / "chat-widget.png" if os.environ.get("FLUE_README_SCREENSHOT") else None
    print(run_driver(python, "drive_chat.py", tmp_path, [browser] + ([str(readme)] if readme else [])))
