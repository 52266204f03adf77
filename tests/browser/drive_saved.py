"""Save a notebook with a chat in JupyterLab and in Notebook 7, shut the kernel down, reopen it;
run by test_saved_notebook_browser (in `.venv-browser`, where Playwright lives).

Each step prints a line and leaves a screenshot in OUT; the first failure exits non-zero.

    drive_saved.py URL OUT CHROMIUM NB_DIR
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

from _page import OUT, TIMEOUT, URL, VISIBLE, cell, drive, open_notebook, run_done, save, send
from _page import step as report
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Locator, Page, expect

NB_DIR = Path(sys.argv[4])
ERROR = "Error displaying widget"


def step(page: Page, text: str, shot: str) -> None:
    page.screenshot(path=str(OUT / f"{shot}.png"), full_page=True)
    report(f"{text} ({shot}.png)")


def figures(where: Locator, count: int) -> Locator:
    """`count` figures drawn in `where`, each visible and decoded (not a broken image)."""
    images = where.locator(".flue-figure img")
    expect(images).to_have_count(count, timeout=TIMEOUT)
    for i in range(count):
        expect(images.nth(i)).to_be_visible()
        loaded = images.nth(i).evaluate("img => img.complete && img.naturalWidth > 0")
        assert loaded, f"figure {i} in {where} did not load"
    return images


def full_size_on_click(image: Locator) -> str:
    """A click on a scaled figure shows it full size; a second one scales it back."""
    small = image.bounding_box()
    image.click()
    expect(image.locator("xpath=ancestor::details")).to_have_attribute("open", "")
    large = image.bounding_box()
    assert small is not None and large is not None and large["width"] > small["width"] * 1.5, (small, large)
    shown = f"{small['width']:.0f} px wide, {large['width']:.0f} px on click"
    image.click()
    return shown


PLACEHOLDER = re.compile(r"Loading widget|Error displaying widget")


def shown_errors(page: Page) -> Locator:
    """The widget errors a person sees in the open notebook. JupyterLab's widget manager can
    write "Error displaying widget: model not found" into the chat's own output when its
    kernel-only restore signals "restored" before the notebook's widget state (the chat's stub)
    is loaded, a race of the manager's; flue's rule keeps that output hidden under the copy, so
    only a visible error is a defect, and a hidden one is reported."""
    hidden = page.locator(VISIBLE).get_by_text(ERROR)
    if hidden.count():
        print(f"    (hidden by flue's rule, not shown: {hidden.count()} widget error line(s))", flush=True)
    return page.locator(VISIBLE + ".jp-OutputArea-output:visible", has_text=ERROR)


def reopened(page: Page, path: str, lab: bool, shot: str) -> None:
    """Open `path` and watch it while its kernel starts: the chat's cell shows its static copy
    and no widget placeholder (issue 33.5), from the first moment its outputs are drawn until the
    kernel is idle and a moment after. A screenshot of the first moment the copy shows."""
    from _page import kernel_idle

    page.goto(f"{URL}/lab/tree/{path}" if lab else f"{URL}/notebooks/{path}")
    if lab:  # Lab shows the workspace's last tab first, then this one
        current = page.locator(".lm-TabBar-tab.lm-mod-current", has_text=path.rsplit("/", 1)[-1])
        expect(current.first).to_be_visible(timeout=TIMEOUT)
    copy = cell(page, 2).locator(".flue-static")
    expect(copy).to_be_visible(timeout=TIMEOUT)
    step(page, f"reopened {path}: the copy shows while the kernel starts", shot)
    seen: list[str] = []
    samples = 0

    def sample() -> None:
        nonlocal samples
        samples += 1
        shown = page.locator(VISIBLE + ".jp-OutputArea-output:visible", has_text=PLACEHOLDER)
        if shown.count():
            seen.append(shown.first.inner_text())
            if len(seen) == 1:  # the first sighting: a later one may be gone by the time of the picture
                page.screenshot(path=str(OUT / f"{shot}-placeholder.png"), full_page=True)

    while True:  # until the kernel is idle
        sample()
        idle = (
            page.get_by_text("flue test | Idle").count()
            if lab
            else page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count()
        )
        if idle:
            break
        time.sleep(0.05)
    kernel_idle(page, lab)
    end = time.monotonic() + 3.0  # the widget manager restores after the kernel is up
    while time.monotonic() < end:
        sample()
        time.sleep(0.1)
    assert not seen, f"a widget placeholder showed above the copy: {seen[:3]}"
    print(f"    no widget placeholder in {samples} looks while {path} reopened", flush=True)


def readable(page: Page, where: str, *, styled: bool = True) -> None:
    """The cell's run and the chat's conversation are shown, figures in place; no widget error
    anywhere. `styled`: the copy's stylesheet applies (a trusted notebook), so a click on a
    scaled figure shows it full size; an untrusted one's is stripped, and the figures show at
    their own size, fitted to the page."""
    run = cell(page, 1).locator(".flue-static")
    expect(run).to_contain_text("The answer is", timeout=TIMEOUT)
    expect(run).to_contain_text("echo hi from bash")
    figures(run, 1)
    copy = cell(page, 2).locator(".flue-static")
    expect(copy).to_be_visible(timeout=TIMEOUT)
    for text in ("what is it?", "and in the chat?", "The chat answers"):
        expect(copy).to_contain_text(text)
    cell_figure, chat_figure = figures(copy, 2).all()  # the conversation's two figures, in order
    expect(cell_figure).to_have_attribute("alt", re.compile(r"^\[figure 1: \d+×\d+ PNG\]$"))
    if styled:
        clicked = full_size_on_click(chat_figure)
    else:
        expect(copy).not_to_contain_text(".flue-figure")  # the stripped stylesheet leaves no text
        box = chat_figure.bounding_box()
        clicked = f"{box['width']:.0f} px wide, unstyled" if box else "no box"
    expect(shown_errors(page)).to_have_count(0)
    print(
        f"    readable {where}: cell run + conversation + 3 figures shown (chat's: {clicked}), no '{ERROR}'", flush=True
    )


def saved(page: Page, lab: bool) -> None:
    """Run, save while live, shut the kernel down from the menu, reopen; in JupyterLab (`lab`)
    or Notebook 7, whose copy of the notebook is in `seven/` (a store of its own)."""
    where, tag, d = ("Lab", "lab", "") if lab else ("Notebook 7", "nb7", "seven/")
    open_notebook(page, f"{d}saved.ipynb", lab=lab)
    for i in range(3):
        run_done(page, i)
    chat = cell(page, 2).locator(".flue-chat")
    send(chat, "and in the chat?")
    expect(chat.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    time.sleep(0.5)
    # Nothing the chat drew was displayed into a cell (the card and the copy show it).
    expect(page.locator(VISIBLE).locator(".jp-RenderedImage")).to_have_count(0)
    # Live: the chat is drawn, its static copy under it is hidden; the settled cell is static.
    expect(cell(page, 2).locator(".flue-static")).to_be_hidden()
    expect(cell(page, 1).locator(".flue-chat")).to_have_count(0)
    step(page, f"{where} live: chat drawn, its copy hidden, the settled cell static", f"{tag}-live")

    # The copy is rewritten after the chat shows the outcome: saved once it holds the answer
    # (seen on a loaded machine: a file saved before it came reopened without the chat's message).
    expect(cell(page, 2).locator(".flue-static")).to_contain_text("The chat answers", timeout=TIMEOUT)
    save(page, f"{d}saved.ipynb", "The chat answers")
    shutil.copy(NB_DIR / f"{d}saved.ipynb", NB_DIR / f"{d}saved-live.ipynb")  # as saved while live
    page.get_by_role("menuitem", name="Kernel", exact=True).click()
    page.get_by_role("menuitem", name=re.compile("Shut Down Kernel")).click()
    try:  # a frontend may ask first
        page.locator(".jp-Dialog .jp-mod-accept").click(timeout=3_000)
    except PlaywrightError:
        pass
    expect(page.get_by_text(re.compile(r"^No Kernel")).first).to_be_visible(timeout=TIMEOUT)
    time.sleep(1.0)
    readable(page, f"in {where} after the kernel shut down (same page)")
    step(page, f"{where}: kernel shut down from the menu, the page shows the copy", f"{tag}-shutdown")
    save(page, f"{d}saved.ipynb")

    # A new kernel starts. The chat's output was retired at the shutdown (text only, no widget):
    # the reopening of the file saved while live, below, is the one a placeholder could show in.
    reopened(page, f"{d}saved.ipynb", lab, f"{tag}-reopening")
    time.sleep(2.0)
    readable(page, f"in {where}, reopened in a new kernel")
    step(page, f"{where}: reopened in a new kernel", f"{tag}-reopened")

    # The file saved while the chat was live, reopened after its kernel died unseen: the
    # readable copy, and no widget error line above it (the chat named its model in the
    # notebook's widget state, as a widget that hides its own output).
    reopened(page, f"{d}saved-live.ipynb", lab, f"{tag}-reopening-live")
    time.sleep(2.0)
    # A byte copy keeps the notebook's signature: the frontend trusts it and draws its HTML.
    copy = cell(page, 2).locator(".jp-OutputArea-output", has_text="and in the chat?")
    expect(copy).to_be_visible(timeout=TIMEOUT)
    expect(copy).to_contain_text("The chat answers")
    figures(copy, 2)  # the copy was rewritten when the chat's message settled, figures and all
    panel = page.locator(VISIBLE)
    expect(panel.get_by_text("Loading widget...")).to_have_count(0, timeout=TIMEOUT)  # the manager restored
    expect(shown_errors(page)).to_have_count(0)
    expect(cell(page, 2).locator(".jupyter-widgets-disconnected:visible")).to_have_count(0)
    step(page, f"{where}: the file saved while the chat was live, reopened: only the copy", f"{tag}-live-copy")

    text = (NB_DIR / f"{d}saved.ipynb").read_text()
    (NB_DIR / f"{d}nokernel.ipynb").write_text(text.replace('"name": "flue-test"', '"name": "no-such-kernel"'))
    page.goto(f"{URL}/lab/tree/nokernel.ipynb" if lab else f"{URL}/notebooks/seven/nokernel.ipynb")
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_be_visible(timeout=TIMEOUT)  # its kernel does not exist here: choose none
    dialog.get_by_role("button", name=re.compile("No Kernel|Cancel")).first.click()
    time.sleep(2.0)
    # The kernel name changed outside Jupyter: Notebook 7 no longer trusts the file (it says so)
    # and strips the copy's stylesheet; JupyterLab here still draws it styled.
    untrusted = not lab and page.get_by_text("Not Trusted").count() > 0
    readable(page, f"in {where} with no kernel" + (" (untrusted)" if untrusted else ""), styled=not untrusted)
    step(page, f"{where}: opened with no kernel", f"{tag}-no-kernel")

    if not lab:
        # Changed outside Jupyter (a cell added): the signature no longer matches, the outputs
        # are untrusted and their HTML sanitised, as a static viewer would.
        changed = json.loads(text)
        changed["cells"].append({"cell_type": "markdown", "id": "added", "metadata": {}, "source": "added"})
        (NB_DIR / f"{d}untrusted.ipynb").write_text(json.dumps(changed))
        open_notebook(page, f"{d}untrusted.ipynb", lab=False)
        expect(page.get_by_text("Not Trusted")).to_be_visible(timeout=TIMEOUT)
        time.sleep(2.0)
        readable(page, "in Notebook 7, untrusted", styled=False)
        step(page, "Notebook 7: the notebook changed outside Jupyter (untrusted)", "nb7-untrusted")


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab", lambda page: saved(page, True)), ("Notebook 7", lambda page: saved(page, False))]))
