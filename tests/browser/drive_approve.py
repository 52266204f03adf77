"""Two notebooks, two kernels, one conversation: Approve in notebook B lets kernel A's run go on.

Run by test_approve_browser (in `.venv-browser`, where Playwright lives). Page A opens a.ipynb
and page B b.ipynb, each with its own kernel and a chat of the conversation `shared` on the
same store. A's chat asks for a `bash` call; B's chat offers it (saying it was asked in
a.ipynb); the click in B lets A's run finish, and both cards say where it was approved. Each
step prints a line; the first failure saves a screenshot of both pages in OUT and exits 1.

    drive_approve.py URL OUT CHROMIUM
"""

from __future__ import annotations

import sys

from _page import OUT, TIMEOUT, URL, VISIBLE, cell, drive, kernel_idle, run_done, send, step
from playwright.sync_api import Page, expect


def chat_of(page: Page, path: str):
    """Open `path` in a Lab workspace of its own (so the page shows that notebook alone), run its
    setup and chat cells; its chat."""
    page.goto(f"{URL}/lab/workspaces/{path.split('.')[0]}/tree/{path}")
    expect(page.locator(VISIBLE + ".jp-Notebook .jp-Cell").first).to_be_visible(timeout=TIMEOUT)
    kernel_idle(page)
    run_done(page, 0)
    run_done(page, 1)
    chat = cell(page, 1).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    return chat


def steps(a: Page, b: Page) -> None:
    chat_a = chat_of(a, "a.ipynb")
    chat_b = chat_of(b, "b.ipynb")
    step("a.ipynb and b.ipynb open, each with its kernel and a chat of `shared`")

    send(chat_a, "approve me")
    expect(chat_a.locator(".flue-tool-awaiting_approval")).to_contain_text("echo approved-run", timeout=TIMEOUT)
    step("A: the bash call waits for approval")
    card_b = chat_b.locator(".flue-tool-awaiting_approval")
    expect(card_b).to_contain_text("bash: echo approved-run (asked in a.ipynb", timeout=TIMEOUT)
    chat_b.screenshot(path=str(OUT / "asked-in-b.png"))
    step("B: the same call offered, saying where it was asked (asked-in-b.png)")

    card_b.locator(".flue-approve").click()
    done_a = chat_a.locator(".flue-tool-ok", has_text="echo approved-run")
    expect(done_a).to_contain_text("approved by the user in b.ipynb", timeout=TIMEOUT)
    expect(chat_a.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    expect(chat_a.locator(".flue-answer").last).to_contain_text("The command ran")
    step("A: the run went on after B's click and completed")
    done_b = chat_b.locator(".flue-tool-ok", has_text="echo approved-run")
    expect(done_b).to_contain_text("approved by the user in b.ipynb", timeout=TIMEOUT)
    expect(chat_b.locator(".flue-tool-awaiting_approval")).to_have_count(0)
    expect(chat_b.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    chat_b.screenshot(path=str(OUT / "approved-in-b.png"))
    step("B: its card and the answer follow (approved-in-b.png)")


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab, two notebooks", steps)], pages=2))
