"""Drive JupyterLab without collaboration: the agent edits the open tab through flue_nb's extension.

Run by test_frontend_edits_browser.py with `.venv-browser`'s Playwright. Cells: 0 setup, 1 `x = 1`
(c1), 2 `y = 2` (c2), 3 the chat, 4 `w = 4` (c4). Each chat message names a plan of the scripted
agent. Each step prints a line; the first failure saves OUT/failure.png and exits non-zero.

    drive_frontend_edits.py URL OUT CHROMIUM
"""

from __future__ import annotations

import re
import sys

from _page import OUT, TIMEOUT, VISIBLE, drive, open_notebook, run_done, send, step
from playwright.sync_api import Page, expect


def by_source(page: Page, text: str):
    """The cells of the notebook in view whose editor shows exactly `text`."""
    exact = re.compile(r"^\s*" + re.escape(text) + r"\s*$")
    return page.locator(VISIBLE + ".jp-Notebook .jp-Cell", has=page.locator(".jp-InputArea-editor", has_text=exact))


def sources(page: Page) -> list[str]:
    return [s.strip() for s in page.locator(VISIBLE + ".jp-Notebook .jp-Cell .jp-InputArea-editor").all_inner_texts()]


def ask(chat, text: str, *, approve: bool = False) -> None:
    """Send `text` (a plan's name), approve its edit when asked, and wait for the agent's answer."""
    send(chat, text)
    if approve:
        card = chat.locator(".flue-tool-awaiting_approval")
        expect(card).to_be_visible(timeout=TIMEOUT)
        card.locator(".flue-approve").click()
    expect(chat.locator(".flue-answer", has_text=f"{text}: done")).to_have_count(1, timeout=TIMEOUT)


def scenario(page: Page) -> None:
    open_notebook(page, "fix.ipynb")
    step("JupyterLab (no collaboration) open, kernel idle")
    run_done(page, 0)
    run_done(page, 3)
    chat = page.locator(VISIBLE + ".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    step("setup and chat cells ran")

    ask(chat, "insert")
    expect(by_source(page, "z = 3")).to_have_count(1, timeout=TIMEOUT)
    assert sources(page)[2] == "z = 3", sources(page)  # below `x = 1` (c1)
    expect(chat.locator(".flue-tool", has_text="insert_cell").last).to_contain_text("in your open tab")
    step("insert_cell: `z = 3` appeared below `x = 1` in the tab")

    ask(chat, "edit", approve=True)
    expect(by_source(page, "x = 10")).to_have_count(1, timeout=TIMEOUT)
    expect(chat.locator(".flue-tool", has_text="edit_cell").last).to_contain_text("of fix.ipynb in your open tab")
    step("edit_cell (approved): `x = 1` became `x = 10`")

    ask(chat, "run")
    expect(by_source(page, "x = 10").locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]"), timeout=TIMEOUT)
    step("run_cell: the edited cell shows its execution count")

    ask(chat, "move")
    expect(page.locator(VISIBLE + ".jp-Notebook .jp-Cell").first.locator(".jp-InputArea-editor")).to_contain_text(
        "y = 2", timeout=TIMEOUT
    )
    step("move_cell: `y = 2` moved to the top")

    ask(chat, "delete")
    expect(by_source(page, "w = 4")).to_have_count(0, timeout=TIMEOUT)
    step("delete_cell: `w = 4` is gone")
    page.locator(VISIBLE).screenshot(path=str(OUT / "frontend-edits.png"))
    step(f"screenshot: {OUT / 'frontend-edits.png'}")

    # The user types into `y = 2` while the agent's edit of it waits for approval.
    send(chat, "race")
    card = chat.locator(".flue-tool-awaiting_approval")
    expect(card).to_be_visible(timeout=TIMEOUT)
    editor = by_source(page, "y = 2").locator(".jp-InputArea-editor .cm-content")
    editor.click()
    page.keyboard.press("End")
    page.keyboard.type("  # mine")
    card.locator(".flue-approve").click()
    expect(chat.locator(".flue-answer", has_text="race: done")).to_have_count(1, timeout=TIMEOUT)
    expect(by_source(page, "y = 2  # mine")).to_have_count(1)
    expect(by_source(page, "y = 20")).to_have_count(0)
    expect(chat.locator(".flue-tool", has_text="edit_cell").last).to_contain_text("changed since you read it")
    step("the approved edit was refused; the user's typing is intact")
    page.locator(VISIBLE).screenshot(path=str(OUT / "frontend-refused.png"))
    step(f"screenshot: {OUT / 'frontend-refused.png'}")

    page.keyboard.press("Control+s")
    page.wait_for_timeout(1500)
    step("saved")


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab without collaboration", scenario)], height=1400))
