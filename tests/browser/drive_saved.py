"""Save a notebook with a chat in JupyterLab, shut the kernel down, reopen it; run by
test_saved_notebook_browser (in `.venv-browser`, where Playwright lives).

Each step prints a line and leaves a screenshot in OUT; the first failure exits non-zero.

    drive_saved.py URL OUT CHROMIUM NB_DIR
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
import traceback
from pathlib import Path

from drive_chat import TIMEOUT, run_cell, wait_done  # the first tab's cells: one notebook open
from playwright.sync_api import Locator, Page, expect, sync_playwright

URL, OUT, CHROMIUM, NB_DIR = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
started = time.monotonic()
ERROR = "Error displaying widget"


def step(page: Page, text: str, shot: str) -> None:
    page.screenshot(path=str(OUT / f"{shot}.png"), full_page=True)
    print(f"[{time.monotonic() - started:6.1f} s] {text} ({shot}.png)", flush=True)


def cell(page: Page, i: int):
    """Cell i of the notebook in view (Lab keeps the other tabs' notebooks in the page, hidden)."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell").nth(i)


def save(page: Page) -> None:
    cell(page, 0).locator(".jp-InputPrompt").click()  # command mode, focus in the notebook
    page.keyboard.press("Control+s")
    time.sleep(1.5)


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
    expect(page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").get_by_text(ERROR)).to_have_count(0)
    print(
        f"    readable {where}: cell run + conversation + 3 figures shown (chat's: {clicked}), no '{ERROR}'", flush=True
    )


def lab(page: Page) -> None:
    page.goto(f"{URL}/lab/tree/saved.ipynb")
    expect(page.get_by_text("flue test | Idle")).to_be_visible(timeout=TIMEOUT)
    for i in range(3):
        run_cell(page, i)
        wait_done(page, i)
    chat = cell(page, 2).locator(".flue-chat")
    box = chat.locator(".flue-input textarea")
    box.fill("and in the chat?")
    box.press("Enter")
    expect(chat.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    time.sleep(0.5)
    # Nothing the chat drew was displayed into a cell (the card and the copy show it).
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    expect(panel.locator(".jp-RenderedImage")).to_have_count(0)
    # Live: the chat is drawn, its static copy under it is hidden; the settled cell is static.
    expect(cell(page, 2).locator(".flue-static")).to_be_hidden()
    expect(cell(page, 1).locator(".flue-chat")).to_have_count(0)
    step(page, "Lab live: chat drawn, its copy hidden, the settled cell static", "lab-live")

    save(page)
    shutil.copy(NB_DIR / "saved.ipynb", NB_DIR / "saved-live.ipynb")  # as saved while live
    page.get_by_role("menuitem", name="Kernel").click()
    page.get_by_role("menuitem", name=re.compile("Shut Down Kernel")).click()
    expect(page.get_by_text(re.compile(r"^No Kernel")).first).to_be_visible(timeout=TIMEOUT)
    time.sleep(1.0)
    readable(page, "after the kernel shut down (same page)")
    step(page, "Lab: kernel shut down from the menu, the page shows the copy", "lab-shutdown")
    save(page)

    page.goto(f"{URL}/lab/tree/saved.ipynb")  # reopened: a new kernel starts
    expect(page.get_by_text("flue test | Idle")).to_be_visible(timeout=TIMEOUT)
    time.sleep(2.0)
    readable(page, "reopened in a new kernel")
    step(page, "Lab: reopened in a new kernel", "lab-reopened")

    page.goto(f"{URL}/lab/tree/saved-live.ipynb")
    expect(page.get_by_text("flue test | Idle")).to_be_visible(timeout=TIMEOUT)
    time.sleep(2.0)
    # A byte copy keeps the notebook's signature: Lab trusts it and draws the copy's HTML.
    copy = cell(page, 2).locator(".jp-OutputArea-output", has_text="and in the chat?")
    expect(copy).to_be_visible(timeout=TIMEOUT)
    expect(copy).to_contain_text("The chat answers")
    figures(copy, 2)  # the copy was rewritten when the chat's message settled, figures and all
    # The widget's own output was saved with its model id, which no kernel has now: the one
    # case where JupyterLab still prints its error line (above the readable copy).
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    expect(panel.get_by_text("Loading widget...")).to_have_count(0, timeout=TIMEOUT)  # the manager restored
    errors = panel.get_by_text(ERROR).count()
    step(
        page, f"Lab: the copy saved while the chat was live, reopened ({errors} widget error line(s))", "lab-live-copy"
    )


def no_kernel(page: Page) -> None:
    page.goto(f"{URL}/lab/tree/nokernel.ipynb")
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_be_visible(timeout=TIMEOUT)  # its kernel does not exist here: choose none
    dialog.get_by_role("button", name=re.compile("No Kernel|Cancel")).first.click()
    time.sleep(2.0)
    readable(page, "with no kernel")
    step(page, "Lab: opened with no kernel", "lab-no-kernel")


def notebook7(page: Page) -> None:
    page.goto(f"{URL}/notebooks/saved.ipynb")
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first).to_be_attached(timeout=TIMEOUT)
    time.sleep(2.0)
    readable(page, "in Notebook 7, new kernel")
    step(page, "Notebook 7: reopened in a new kernel", "nb7-reopened")

    # Changed outside Jupyter (a cell added): the signature no longer matches, the outputs are
    # untrusted and their HTML sanitised, as a static viewer would.
    page.goto(f"{URL}/notebooks/untrusted.ipynb")
    expect(page.get_by_text("Not Trusted")).to_be_visible(timeout=TIMEOUT)
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first).to_be_attached(timeout=TIMEOUT)
    time.sleep(2.0)
    readable(page, "in Notebook 7, untrusted", styled=False)
    step(page, "Notebook 7: the notebook changed outside Jupyter (untrusted)", "nb7-untrusted")


def main() -> int:
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )  # fmt: skip
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        try:
            lab(page)
            text = (NB_DIR / "saved.ipynb").read_text()
            nk = text.replace('"name": "flue-test"', '"name": "no-such-kernel"')
            (NB_DIR / "nokernel.ipynb").write_text(nk)
            changed = json.loads(text)
            changed["cells"].append({"cell_type": "markdown", "id": "added", "metadata": {}, "source": "added"})
            (NB_DIR / "untrusted.ipynb").write_text(json.dumps(changed))
            no_kernel(page)
            notebook7(page)
        except Exception:  # noqa: BLE001 - any failure: screenshot, report, exit 1
            page.screenshot(path=str(OUT / "failure.png"), full_page=True)
            traceback.print_exc()
            print(f"FAILED; screenshot: {OUT / 'failure.png'}", flush=True)
            return 1
        finally:
            browser.close()
    print("all steps passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
