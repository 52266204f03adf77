"""A chat in a narrow JupyterLab: an approved call's figure is kept, and nothing is cut to "…".

Run by test_narrow_browser (in `.venv-browser`). At 600 px with the file browser open, the chat
of narrow.ipynb asks to run a `python` call that draws a plot (approval "ask"); Approve in the
chat lets it run, its card shows the figure and the model says it saw one image (issue 33.1).
The title and the gauge line wrap instead of ending in "…" (issue 33.8). Screenshots in OUT.

    drive_narrow.py URL OUT CHROMIUM
"""

from __future__ import annotations

import sys

from _page import OUT, TIMEOUT, URL, VISIBLE, cell, drive, kernel_idle, run_done, send, step
from playwright.sync_api import Page, expect

CUT = "e => e.scrollWidth > e.clientWidth + 1 || getComputedStyle(e).textOverflow === 'ellipsis'"


def steps(page: Page) -> None:
    page.goto(f"{URL}/lab/tree/narrow.ipynb")
    expect(page.locator(VISIBLE + ".jp-Notebook .jp-Cell").first).to_be_visible(timeout=TIMEOUT)
    kernel_idle(page)
    browser = page.locator(".jp-FileBrowser")
    if not browser.is_visible():
        page.locator(".jp-SideBar.jp-mod-left [data-id='filebrowser']").click()
    expect(browser).to_be_visible(timeout=TIMEOUT)
    run_done(page, 0)
    run_done(page, 1)
    chat = cell(page, 1).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    width = chat.evaluate("c => c.getBoundingClientRect().width")
    step(f"600 px, file browser open: the chat is {width:.0f} px wide")

    title = chat.locator(".flue-title")
    expect(title).to_contain_text("narrow-chat")
    assert not title.evaluate(CUT), f"the title is cut: {title.inner_text()!r}"
    send(chat, "plot it")
    card = chat.locator(".flue-tool-awaiting_approval")
    expect(card).to_be_visible(timeout=TIMEOUT)
    chat.screenshot(path=str(OUT / "narrow-asking.png"))
    card.locator(".flue-approve").click()
    done = chat.locator(".flue-tool-ok", has_text="plt.plot")
    expect(done.locator("img")).to_have_count(1, timeout=TIMEOUT)
    expect(chat.locator(".flue-answer").last).to_contain_text("I saw 1 image(s)", timeout=TIMEOUT)
    step("the approved call's card shows its figure and the model saw it")
    gauge = chat.locator(".flue-gauge-text")
    expect(gauge).to_contain_text("tokens")
    assert not gauge.evaluate(CUT), f"the gauge line is cut: {gauge.inner_text()!r}"
    assert not title.evaluate(CUT), f"the title is cut: {title.inner_text()!r}"
    chat.screenshot(path=str(OUT / "narrow-approved.png"))
    page.screenshot(path=str(OUT / "narrow-page.png"))
    step("title and gauge wrap, nothing ends in an ellipsis (narrow-approved.png, narrow-page.png)")


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab at 600 px, file browser open", steps)], width=600, height=1100))
