"""A chat in a narrow window: an approved call's figure is kept, and nothing is cut to "…".

Run by test_narrow_browser (in `.venv-browser`), in JupyterLab, then in Notebook 7 (the same
server). At 600 px, in JupyterLab with the file browser open (narrow.ipynb) and in Notebook 7
with its dark theme (narrow7.ipynb), the chat asks to run a `python` call that draws a plot
(approval "ask"); Approve in the chat lets it run, its card shows the figure and the model says
it saw one image (issue 33.1). The title and the gauge line wrap instead of ending in "…"
(issue 33.8): in JupyterLab's 230 px chat, and in Notebook 7 once its page is narrowed to
360 px (at 600 px its chat fits both on one line). Screenshots in OUT.

    drive_narrow.py URL OUT CHROMIUM
"""

from __future__ import annotations

import re
import sys

from _page import OUT, TIMEOUT, URL, VISIBLE, cell, drive, kernel_idle, open_notebook, run_done, send, step
from playwright.sync_api import Locator, Page, expect

CUT = "e => e.scrollWidth > e.clientWidth + 1 || getComputedStyle(e).textOverflow === 'ellipsis'"
LINES = """e => { const r = document.createRange(); r.selectNodeContents(e);
  return new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top))).size; }"""
"""How many lines an element's text takes."""
PHONE = 360
"""The narrower width Notebook 7 is tried at: its chat at 600 px fits the title on one line."""


def lab(page: Page) -> None:
    page.goto(f"{URL}/lab/tree/narrow.ipynb")
    expect(page.locator(VISIBLE + ".jp-Notebook .jp-Cell").first).to_be_visible(timeout=TIMEOUT)
    kernel_idle(page)
    browser = page.locator(".jp-FileBrowser")
    if not browser.is_visible():
        page.locator(".jp-SideBar.jp-mod-left [data-id='filebrowser']").click()
    expect(browser).to_be_visible(timeout=TIMEOUT)
    approved_figure(page, "JupyterLab, file browser open", "narrow-chat", "narrow")


def seven(page: Page) -> None:
    open_notebook(page, "narrow7.ipynb", lab=False)
    page.get_by_role("menuitem", name="Settings", exact=True).click()
    menu_item(page, re.compile(r"^Theme$")).click()
    menu_item(page, "JupyterLab Dark").click()
    expect(page.locator("body[data-jp-theme-light='false']")).to_be_attached(timeout=TIMEOUT)
    chat = approved_figure(page, "Notebook 7, dark theme", "narrow-seven", "narrow7")
    # At 600 px Notebook 7's chat is wide enough for both lines: narrower, they must wrap.
    page.set_viewport_size({"width": PHONE, "height": 1100})
    page.wait_for_function("w => window.innerWidth === w", arg=PHONE)
    width = chat.evaluate("c => c.getBoundingClientRect().width")
    wrapped(chat.locator(".flue-title"), "title")
    wrapped(chat.locator(".flue-gauge-text"), "gauge line")
    chat.screenshot(path=str(OUT / "narrow7-phone.png"))
    step(f"Notebook 7 at {PHONE} px (chat {width:.0f} px wide): title and gauge wrap (narrow7-phone.png)")


def menu_item(page: Page, label: str | re.Pattern[str]) -> Locator:
    """The item of an open menu whose label is `label` (a submenu's entry has no menuitem role)."""
    return page.locator("li.lm-Menu-item", has=page.locator(".lm-Menu-itemLabel", has_text=label)).first


def approved_figure(page: Page, where: str, conversation: str, tag: str) -> Locator:
    """Run the notebook's setup and chat cells, approve the plotting call in the chat: its card
    shows the figure, the model saw it, the title and the gauge line are whole."""
    run_done(page, 0)
    run_done(page, 1)
    chat = cell(page, 1).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    width = chat.evaluate("c => c.getBoundingClientRect().width")
    step(f"{where}, 600 px: the chat is {width:.0f} px wide")

    title = chat.locator(".flue-title")
    expect(title).to_contain_text(conversation)
    whole(title, "title")
    send(chat, "plot it")
    card = chat.locator(".flue-tool-awaiting_approval")
    expect(card).to_be_visible(timeout=TIMEOUT)
    chat.screenshot(path=str(OUT / f"{tag}-asking.png"))
    card.locator(".flue-approve").click()
    done = chat.locator(".flue-tool-ok", has_text="plt.plot")
    figure = done.locator("img")
    expect(figure).to_have_count(1, timeout=TIMEOUT)
    expect(figure).to_be_visible()
    assert figure.evaluate("img => img.complete && img.naturalWidth > 0"), "the card's figure did not load"
    expect(chat.locator(".flue-answer").last).to_contain_text("I saw 1 image(s)", timeout=TIMEOUT)
    step("the approved call's card shows its figure and the model saw it")
    gauge = chat.locator(".flue-gauge-text")
    expect(gauge).to_contain_text("tokens")
    whole(gauge, "gauge line")
    whole(title, "title")
    if width < 400:
        wrapped(title, "title")
        wrapped(gauge, "gauge line")
    chat.screenshot(path=str(OUT / f"{tag}-approved.png"))
    page.screenshot(path=str(OUT / f"{tag}-page.png"))
    step(f"title and gauge whole, nothing ends in an ellipsis ({tag}-approved.png, {tag}-page.png)")
    return chat


def whole(line: Locator, what: str) -> None:
    """`line` shows all its text: neither cut by its box nor ending in an ellipsis."""
    assert not line.evaluate(CUT), f"the {what} is cut: {line.inner_text()!r}"


def wrapped(line: Locator, what: str) -> None:
    """`line`, too long for its narrow box, is whole on several lines (so the check above was
    not passed by a line that merely fitted)."""
    whole(line, what)
    rows = line.evaluate(LINES)
    assert rows >= 2, f"the {what} is on {rows} line(s) in a narrow chat: {line.inner_text()!r}"
    print(f"    the {what} wraps onto {rows} lines", flush=True)


if __name__ == "__main__":
    sys.exit(
        drive(
            [("JupyterLab at 600 px, file browser open", lab), ("Notebook 7 at 600 px, dark", seven)],
            width=600,
            height=1100,
        )
    )
