"""The changes panel in JupyterLab's chat: collapsed after a run, opened to its diff, one Undo.

Run by test_changes_browser (in `.venv-browser`, where Playwright lives). Each step prints a
line; the first failure saves a screenshot in OUT and exits 1.

    drive_changes.py URL OUT CHROMIUM
"""

from __future__ import annotations

import sys

from _page import OUT, TIMEOUT, cell, drive, open_notebook, run_done, send, step
from playwright.sync_api import Page, expect


def steps(page: Page) -> None:
    open_notebook(page, "review.ipynb")
    run_done(page, 0)
    run_done(page, 1)
    chat = cell(page, 1).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    step("review.ipynb open, the chat of `tidy` idle")

    send(chat, "tidy up")
    expect(chat.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    panel = chat.locator(".flue-changes").last
    expect(panel.locator("summary")).to_contain_text("2 changes: 1 file, 1 variable", timeout=TIMEOUT)
    expect(panel).not_to_have_attribute("open", "")
    expect(panel.locator(".flue-chg-body")).to_be_hidden()
    expect(chat.locator(".flue-rewind")).to_have_count(2)  # one per tool card with effects
    chat.screenshot(path=str(OUT / "panel-collapsed.png"))
    step("the run ends with the panel as one line (panel-collapsed.png)")

    panel.locator("summary").click()
    item = panel.locator('.flue-chg[data-item="1.1"]')
    expect(item.locator(".flue-diff .flue-del")).to_contain_text("threshold = 10")
    expect(item.locator(".flue-diff .flue-add")).to_contain_text("threshold = 20  # stricter")
    expect(item.locator(".flue-diff .hljs-number").first).to_be_visible()  # coloured as python
    expect(panel.locator('.flue-chg[data-item="2.1"]')).to_contain_text("rows: list len 3 → len 1")
    chat.screenshot(path=str(OUT / "panel-open.png"))
    step("opened: the file's diff, coloured, and the variable's summary (panel-open.png)")

    item.locator(".flue-undo").click()
    expect(item.locator(".flue-undone")).to_have_text("undone", timeout=TIMEOUT)
    expect(panel.locator(".flue-chg-said")).to_contain_text("Undone 1 item")
    expect(panel.locator("summary")).to_contain_text("(1 undone)")
    expect(panel.locator('.flue-chg[data-item="2.1"] .flue-undo')).to_be_visible()  # the other stays
    text = (OUT / "nb" / "clean.py").read_text()
    assert "threshold = 10\n" in text, text
    chat.screenshot(path=str(OUT / "panel-undone.png"))
    step("Undo clicked: clean.py is back on disk, the panel says so (panel-undone.png)")


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab", steps)]))
