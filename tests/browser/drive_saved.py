"""Save a notebook with a chat in JupyterLab, shut the kernel down, reopen it; run by
test_saved_notebook_browser (in `.venv-browser`, where Playwright lives).

Each step prints a line and leaves a screenshot in OUT; the first failure exits non-zero.

    drive_saved.py URL OUT CHROMIUM NB_DIR
"""

from __future__ import annotations

import re
import shutil
import sys
import time
import traceback
from pathlib import Path

from drive_chat import TIMEOUT, run_cell, wait_done  # the first tab's cells: one notebook open
from playwright.sync_api import Page, expect, sync_playwright

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


def readable(page: Page, where: str) -> None:
    """The cell's run and the chat's conversation are shown; no widget error anywhere."""
    expect(cell(page, 1).locator(".flue-static")).to_contain_text("The answer is", timeout=TIMEOUT)
    expect(cell(page, 1).locator(".flue-static")).to_contain_text("echo hi from bash")
    copy = cell(page, 2).locator(".flue-static")
    expect(copy).to_be_visible(timeout=TIMEOUT)
    for text in ("what is it?", "and in the chat?", "The chat answers"):
        expect(copy).to_contain_text(text)
    expect(page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").get_by_text(ERROR)).to_have_count(0)
    print(f"    readable {where}: cell run + conversation shown, no '{ERROR}'", flush=True)


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
    # A copied file is not trusted: Lab draws the copy's markdown instead of its HTML.
    copy = cell(page, 2).locator(".jp-OutputArea-output", has_text="and in the chat?")
    expect(copy).to_be_visible(timeout=TIMEOUT)
    expect(copy).to_contain_text("The chat answers")
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
