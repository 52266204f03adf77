"""A saved notebook reads the same without the kernel that ran it (issue 19.1).

nbclient runs the cells in a real kernel with the chat widget drawn (as a person's frontend
would: `FlueMagics.widget = "always"`), stores the notebook, and nbconvert exports it to HTML:
what a static viewer and a kernel that never saw the widgets get. The browser side (JupyterLab
and Notebook 7, reopened in a new kernel and with none) is `tests/browser/test_saved_notebook_browser.py`.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from kernel_helpers import KERNEL_NAME, Kernel, _spec_manager, jupyter_env

from flue_nb.runtime.images import sniff

pytest.importorskip("anywidget", reason="the chat widget needs the `widget` extra")
pytest.importorskip("matplotlib", reason="the runs draw matplotlib figures (the `test` extra has it)")

pytestmark = pytest.mark.kernel

VIEW = "application/vnd.jupyter.widget-view+json"

SETUP = """\
import time
import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.notebook.views.chat.widget import open_widgets
%config FlueMagics.db = 'flue.sqlite'
%config FlueMagics.widget = 'always'
PLOT = "import matplotlib.pyplot as plt\\nplt.figure(figsize=(4, 3), dpi=50)\\nplt.plot([1, 3, 2])\\nplt.title('{}')"
m = ScriptedModel([
    reply("Checking.", tool_call("bash", "c1", command="echo hi from bash"),
          tool_call("python", "p1", code=PLOT.format("drawn in the cell"))),
    reply("### Result\\nThe cell's answer is **42**."),
    reply("Plotting.", tool_call("python", "p2", code=PLOT.format("drawn from the chat"))),
    # Streamed slowly, so it settles while the next cell runs (nbclient keeps only the updates
    # addressed to a running cell; a frontend applies them by display id).
    reply("The chat's answer: <script>alert(1)</script> and `code`. " + " ".join(["more"] * 80)),
] + ["again"] * 5, delay=0.01)
%config FlueMagics.model = 'm'
"""

WAIT = """\
w = open_widgets()[-1]
for _ in range(200):
    if not w.live and w.history and w.history[-1]["outcome"]:
        break
    time.sleep(0.05)
time.sleep(0.3)
"""

RUN = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, kernel_name=sys.argv[2], timeout=120,
               resources={"metadata": {"path": sys.argv[3]}}).execute()
nbformat.write(nb, sys.argv[1])
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory: Any) -> tuple[Path, Any]:
    root, cwd = tmp_path_factory.mktemp("jupyter"), tmp_path_factory.mktemp("work")
    cells = [SETUP, "%%flue -c s1\nwhat is it?", "%%flue chat -c s1\nand in the chat?", WAIT]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = cwd / "saved.ipynb"
    nbformat.write(nb, path)
    _spec_manager(root)
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(path), KERNEL_NAME, str(cwd)],
        check=False, env=jupyter_env(root), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return path, nbformat.read(path, as_version=4)


def _figures(html: str) -> list[bytes]:
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([^"]+)"', html)]


def test_a_settled_cell_is_stored_as_a_static_bundle_with_no_widget(saved: tuple[Path, Any]) -> None:
    [out] = saved[1].cells[1].outputs  # one output: the figure is not displayed again below it
    assert VIEW not in out["data"]
    assert set(out["data"]) == {"text/plain", "text/markdown", "text/html"}
    assert "<h3>Result</h3>" in out["data"]["text/html"] and "<strong>42</strong>" in out["data"]["text/html"]
    assert "echo hi from bash" in out["data"]["text/html"]
    assert out["metadata"]["flue"]["status"] == "completed"


def test_a_cells_figure_is_in_its_static_bundle_in_the_tool_cards_place(saved: tuple[Path, Any]) -> None:
    [out] = saved[1].cells[1].outputs
    html, md, plain = (out["data"][k] for k in ("text/html", "text/markdown", "text/plain"))
    [png] = _figures(html)  # drawn once, from the run's own bytes
    assert sniff(png) is not None and sniff(png)[0] == "image/png"  # type: ignore[index]
    assert html.index("<strong>python</strong>") < html.index("data:image/png") < html.index("<h3>Result</h3>")
    assert "<details>" in html  # scaled, full size on click
    # The markdown and the text name it; its bytes are in the output once.
    assert re.search(r"\[figure 1: \d+×\d+ PNG\]", plain) and "[figure 1:" in md and "base64" not in md


def test_the_chats_copy_draws_both_figures_of_its_conversation_from_the_store(saved: tuple[Path, Any]) -> None:
    _live, copy = saved[1].cells[2].outputs
    html = copy["data"]["text/html"]
    cell_png, chat_png = _figures(html)  # the cell's figure (same conversation) and the chat's own
    assert cell_png != chat_png
    assert html.index("and in the chat?") < html.index(base64.b64encode(chat_png).decode()) < html.index("The chat")
    assert "base64" not in copy["data"]["text/markdown"]
    # Nothing the chat drew was displayed into the cell running at the time.
    assert not [o for c in saved[1].cells for o in c.outputs if "image/png" in o.get("data", {})]


def test_a_chat_is_stored_with_a_static_copy_of_its_conversation_under_it(saved: tuple[Path, Any]) -> None:
    live, copy = saved[1].cells[2].outputs
    assert VIEW in live["data"] and live["data"]["text/plain"] == ""
    assert VIEW not in copy["data"]
    html = copy["data"]["text/html"]
    # The copy was rewritten when the chat's message settled: the whole conversation is in it.
    for text in ("what is it?", "The cell's answer is", "and in the chat?", "The chat's answer"):
        assert text in html and text in copy["data"]["text/markdown"], text
    assert "<script>" not in html and "&lt;script&gt;" in html  # the model's text is untrusted


def test_nbconvert_html_shows_the_cell_and_the_conversation_and_no_widget_error(
    saved: tuple[Path, Any], tmp_path: Path
) -> None:
    from nbconvert import HTMLExporter

    # A notebook as a person saves it: no widget state (the widget manager's saveState is off).
    nb = saved[1]
    nb.metadata.pop("widgets", None)
    body, _ = HTMLExporter().from_notebook_node(nb)
    for text in ("The cell&#39;s answer is", "echo hi from bash", "The chat&#39;s answer", "and in the chat?"):
        assert text in body or text.replace("&#39;", "'") in body, text
    # The cell's figure (in its bundle and in the chat's copy) and the chat's: three images.
    assert len(_figures(body)) == 3 and len(set(_figures(body))) == 2
    assert "model not found" not in body and "Error displaying widget" not in body


def test_a_frontend_shutdown_leaves_the_copy_and_no_widget_in_the_chats_outputs(tmp_path: Path) -> None:
    """The kernel rewrites its chat outputs before it exits: a notebook saved then has no widget."""
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP)
        chat = kernel.ok("%%flue chat -c s2\nhello")
        kernel.ok(WAIT)
        [live_id, copy_id] = list(chat.displays)
        assert VIEW in chat.displays[live_id]["data"]
        kernel.kc.shutdown()  # what JupyterLab's "Shut Down Kernel" sends
        updates: dict[str, Any] = {}
        while True:
            try:
                msg = kernel.kc.get_iopub_msg(timeout=10)
            except Exception:  # noqa: BLE001 - no more messages: the kernel is gone
                break
            if msg["msg_type"] == "update_display_data":
                updates[msg["content"]["transient"]["display_id"]] = msg["content"]["data"]
            if msg["msg_type"] == "shutdown_reply":
                break
    finally:
        kernel.shutdown()
    assert updates[live_id] == {"text/plain": ""}, json.dumps(updates)[:2000]
    assert "hello" in updates[copy_id]["text/html"] and VIEW not in updates[copy_id]
    # Rewritten from the store as the kernel goes: the figure the run drew is still in it.
    assert len(_figures(updates[copy_id]["text/html"])) == 1
