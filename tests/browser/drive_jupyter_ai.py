"""Drive jupyter-ai's chat in JupyterLab: a message to the flue_nb persona runs in the notebook's kernel.

Run by test_jupyter_ai_browser.py with `.venv-jupyter-ai`'s Playwright. First the chat
`analysis.chat` is opened with no kernel running: flue_nb is picked in the chat input's persona
picker and says it has no notebook kernel to work in. Then `analysis.ipynb` (the notebook beside the
chat) is opened and its first cell run, and the message is sent again: flue_nb asks to run its
`python` call (jupyter-ai shows the ACP permission request on the call's card), the driver approves
it, and the answer appears in the chat. Screenshots: OUT/jupyter-ai-no-kernel.png,
OUT/jupyter-ai-ask.png, OUT/jupyter-ai-answer.png; the chat's text: OUT/chat.txt.

    drive_jupyter_ai.py URL OUT CHROMIUM MESSAGE ANSWER
"""

from __future__ import annotations

import sys
from typing import Any

from _page import OUT, TIMEOUT, URL, VISIBLE, drive, kernel_idle, run_done, step
from playwright.sync_api import Page, expect

MESSAGE, ANSWER = sys.argv[4], sys.argv[5]
NO_KERNEL = "no notebook has a running kernel"
PERMISSION = ".jp-jupyter-ai-acp-client-permission-buttons"


def open_chat(page: Page) -> Any:
    """Open `analysis.chat` with flue_nb picked in its input; the chat's panel."""
    page.goto(f"{URL}/lab/tree/analysis.chat")
    panels = page.locator(".jp-MainAreaWidget:not(.lm-mod-hidden)")
    panel = panels.filter(has=page.locator(".jp-chat-input-container")).first
    expect(panel).to_be_visible(timeout=TIMEOUT)
    picker = panel.locator(".jp-jai-personaControls-persona-btn").first
    expect(picker).to_be_visible(timeout=TIMEOUT)
    if "flue_nb" not in picker.inner_text():
        picker.click()
        page.get_by_role("menuitem", name="flue_nb").or_(page.get_by_role("option", name="flue_nb")).first.click()
    expect(picker).to_contain_text("flue_nb", timeout=TIMEOUT)
    step("analysis.chat is open, flue_nb picked in its input")
    return panel


def send(panel: Any, text: str) -> None:
    """Type `text` into the chat's input and press Enter."""
    box = panel.locator(".jp-chat-input-container textarea").first
    box.click()
    box.fill(text)
    box.press("Enter")


def no_kernel_is_said_plainly(page: Page) -> None:
    panel = open_chat(page)
    send(panel, MESSAGE)
    expect(panel.get_by_text(NO_KERNEL)).to_be_visible(timeout=TIMEOUT)
    page.screenshot(path=str(OUT / "jupyter-ai-no-kernel.png"), full_page=True)
    step("with no notebook kernel running, flue_nb says so")


def the_notebooks_kernel_runs(page: Page) -> None:
    page.goto(f"{URL}/lab/tree/analysis.ipynb")
    expect(page.locator(VISIBLE + ".jp-Notebook .jp-Cell").first).to_be_visible(timeout=TIMEOUT)
    kernel_idle(page)
    run_done(page, 0)
    step("analysis.ipynb is open and its kernel ran `x = 1`")


def flue_nb_answers_in_the_chat(page: Page) -> None:
    panel = open_chat(page)
    send(panel, MESSAGE)
    allow = panel.locator(".jp-jupyter-ai-acp-client-permission-btn-allow-once")
    expect(allow).to_be_visible(timeout=TIMEOUT * 3)
    page.screenshot(path=str(OUT / "jupyter-ai-ask.png"), full_page=True)
    asked = " ".join(panel.locator(PERMISSION).first.inner_text().split())
    step(f"flue_nb asks before running its call: {asked!r}")
    allow.click()
    expect(panel.get_by_text(ANSWER)).to_be_visible(timeout=TIMEOUT * 3)
    expect(panel.locator(PERMISSION)).to_have_count(0)  # answered: the card shows the decision
    page.screenshot(path=str(OUT / "jupyter-ai-answer.png"), full_page=True)
    step(f"the answer is in the chat: {ANSWER!r}")
    (OUT / "chat.txt").write_text(panel.inner_text())


if __name__ == "__main__":
    sys.exit(drive([("no notebook kernel yet", no_kernel_is_said_plainly),
                    ("the notebook's kernel runs", the_notebooks_kernel_runs),
                    ("flue_nb answers in jupyter-ai's chat", flue_nb_answers_in_the_chat)]))  # fmt: skip
