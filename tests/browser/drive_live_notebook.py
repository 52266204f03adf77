"""Drive JupyterLab with collaboration: a cell raises, the chat asks for a fix, the agent fixes it live.

Run by test_live_notebook_browser.py with `.venv-live`'s Playwright. Each step prints a line; the
first failure saves OUT/failure.png and exits non-zero with what was expected; the end state is
OUT/live-fix.png (the notebook with the fixed cell and its new output).

    drive_live_notebook.py URL OUT CHROMIUM
"""

from __future__ import annotations

import re
import sys
import time
import traceback
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

URL, OUT, CHROMIUM = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
TIMEOUT = 60_000
started = time.monotonic()


def step(text: str) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {text}", flush=True)


def cell(page: Page, i: int):
    return page.locator(".jp-Notebook .jp-Cell").nth(i)


def run_cell(page: Page, i: int) -> None:
    """Select cell i and run it with Shift+Enter, as a person would."""
    prompt = cell(page, i).locator(".jp-InputPrompt")
    before = prompt.inner_text()
    for _ in range(3):
        cell(page, i).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        try:  # a kernel that was still connecting can drop the first request
            expect(prompt).not_to_have_text(before, timeout=10_000)
            return
        except AssertionError:
            continue
    raise AssertionError(f"cell {i} did not start running after three Shift+Enter")


def wait_done(page: Page, i: int) -> None:
    expect(cell(page, i).locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]"), timeout=TIMEOUT)


def scenario(page: Page) -> None:
    page.goto(f"{URL}/lab/tree/fix.ipynb")
    expect(page.locator(".jp-Notebook .jp-Cell").first).to_be_visible(timeout=TIMEOUT)
    expect(page.get_by_text("flue test | Idle")).to_be_visible(timeout=TIMEOUT)
    step("JupyterLab (with collaboration) open, kernel idle")

    run_cell(page, 0)
    wait_done(page, 0)
    step("setup cell ran")

    broken = cell(page, 1)
    run_cell(page, 1)
    wait_done(page, 1)
    expect(broken.locator(".jp-OutputArea-output")).to_contain_text("KeyError", timeout=TIMEOUT)
    step("the user's cell raised KeyError")

    run_cell(page, 2)
    chat = cell(page, 2).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    box = chat.locator(".flue-input textarea")
    box.fill("fix the error above")
    box.press("Enter")
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


def main() -> int:
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )  # fmt: skip
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        try:
            scenario(page)
        except Exception:
            traceback.print_exc()
            page.screenshot(path=str(OUT / "failure.png"), full_page=True)
            return 1
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
