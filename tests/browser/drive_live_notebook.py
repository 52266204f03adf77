"""Drive JupyterLab with collaboration: a cell raises, the chat asks for a fix, the agent fixes it live.

Run by test_live_notebook_browser.py with `.venv-live`'s Playwright. Each step prints a line; the
first failure saves OUT/failure.png and exits non-zero with what was expected; the end state is
OUT/live-fix.png (the notebook with the fixed cell and its new output), and the Collaboration
panel listing the agent on the notebook, OUT/live-collaborators.png.

    drive_live_notebook.py URL OUT CHROMIUM
"""

from __future__ import annotations

import re
import sys

from _page import OUT, TIMEOUT, cell, drive, open_notebook, run_done, send, step
from playwright.sync_api import Page, expect


def scenario(page: Page) -> None:
    # On a loaded machine the collaborative document can take long enough to sync that Lab asks
    # whether to keep waiting (a modal that stays up even once it has synced): keep waiting, as a
    # person would.
    page.add_locator_handler(page.get_by_role("button", name="Continue waiting"), lambda button: button.click())
    open_notebook(page, "fix.ipynb")
    step("JupyterLab (with collaboration) open, kernel idle")

    run_done(page, 0)
    step("setup cell ran")

    broken = cell(page, 1)
    run_done(page, 1)
    expect(broken.locator(".jp-OutputArea-output")).to_contain_text("KeyError", timeout=TIMEOUT)
    step("the user's cell raised KeyError")

    run_done(page, 2)
    chat = cell(page, 2).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    send(chat, "fix the error above")
    step("chat: asked to fix the error")

    expect(chat.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    for tool in ("cell", "edit_cell", "run_cell"):
        expect(chat.locator(".flue-tool", has_text=tool).first).to_be_visible()
    step("chat: the agent read the error, edited the cell and ran it")

    # The fixed source and its new output are in the user's own cell, drawn by Lab from the
    # shared document: nobody touched this page but the agent, through the server.
    expect(broken.locator(".jp-InputArea-editor")).to_contain_text('sales["north"]', timeout=TIMEOUT)
    expect(broken.locator(".jp-OutputArea-output")).to_contain_text("total: 215", timeout=TIMEOUT)
    expect(broken.locator(".jp-OutputArea-output")).not_to_contain_text("KeyError")
    expect(broken.locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]"))
    # Lab marks a cell edited since it ran ("dirty") until it sees the cell run: it saw this one.
    expect(broken).not_to_have_class(re.compile(r"jp-mod-dirty"))
    step("the cell shows the fixed source, its new output and an execution count (not marked edited)")

    broken.scroll_into_view_if_needed()
    page.locator(".jp-NotebookPanel").screenshot(path=str(OUT / "live-fix.png"))
    step(f"screenshot: {OUT / 'live-fix.png'}")

    # The agent is listed where collaborators are (issue 35.4): the Collaboration panel's online
    # collaborators, on this notebook.
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jp-collaboration-panel"]').click()
    agent = page.locator(".jp-CollaboratorsList .jp-Collaborator", has_text="flue agent")
    expect(agent).to_have_count(1, timeout=TIMEOUT)
    expect(agent.locator(".jp-CollaboratorIcon")).to_have_text("FA")
    agent.locator(".jp-ClickableCollaborator").click()  # its documents
    expect(agent.locator(".jp-DirListing-item.jp-mod-running")).to_have_text("fix.ipynb")
    page.locator("#jp-collaboration-panel").screenshot(path=str(OUT / "live-collaborators.png"))
    step(f"the Collaboration panel lists 'flue agent' on fix.ipynb: {OUT / 'live-collaborators.png'}")


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab with collaboration", scenario)], height=1100))
