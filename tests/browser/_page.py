"""What every browser driver does to a JupyterLab or Notebook 7 page (run in `.venv-browser`).

The drivers (`drive_*.py`) are scripts Playwright runs outside the test process: each imports
these helpers and ends with `drive(...)`, which launches Debian's Chromium, runs its scenarios
in order, and on the first failure saves `failure.png` in OUT and exits non-zero.

    drive_x.py URL OUT CHROMIUM [more arguments the driver reads from sys.argv[4:]]
"""

from __future__ import annotations

import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect, sync_playwright

URL, OUT, CHROMIUM = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
TIMEOUT = 60_000
# A check with no timeout of its own waits 20 s, not Playwright's 5: on a loaded machine (the
# tests run in parallel) a page can be that slow. A check passes as soon as it holds, so only a
# failure takes longer.
expect.set_options(timeout=20_000)
_started = time.monotonic()
VISIBLE = ".jp-NotebookPanel:not(.lm-mod-hidden) "
"""The notebook in view (Lab keeps other tabs' notebooks in the page, hidden)."""


def step(text: str) -> None:
    """One line of the driver's report, with the seconds since it started."""
    print(f"[{time.monotonic() - _started:6.1f} s] {text}", flush=True)


def cell(page: Page, i: int) -> Any:
    """Cell i of the notebook in view."""
    return page.locator(VISIBLE + ".jp-Notebook .jp-Cell").nth(i)


def kernel_dialog_out_of_the_way(page: Page) -> None:
    """Accept a kernel dialog the front end opened on its own (on a loaded machine Notebook 7 has
    opened one over a freshly opened notebook), saying so; any other dialog fails, naming it."""
    dialog = page.locator(".jp-Dialog")
    if not dialog.count() or not dialog.first.is_visible():
        return
    text = " ".join(dialog.first.inner_text().split())
    if "kernel" not in text.lower():
        raise AssertionError(f"a dialog is in the way: {text[:300]!r}")
    step(f"accepted a kernel dialog the front end opened: {text[:200]!r}")
    dialog.first.locator(".jp-mod-accept").click()
    expect(dialog).to_have_count(0)


def run_cell(page: Page, i: int) -> None:
    """Select cell i and run it with Shift+Enter, as a person would."""
    prompt = cell(page, i).locator(".jp-InputPrompt")
    before = prompt.inner_text()
    for _ in range(3):
        kernel_dialog_out_of_the_way(page)
        cell(page, i).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        try:  # a kernel that was still connecting can drop the first request
            expect(prompt).not_to_have_text(before, timeout=10_000)
            return
        except AssertionError:
            continue
    raise AssertionError(f"cell {i} did not start running after three Shift+Enter")


def wait_done(page: Page, i: int, timeout: float = TIMEOUT) -> None:
    """Until cell i's prompt shows an execution count (not `[*]`)."""
    expect(cell(page, i).locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]"), timeout=timeout)


def run_done(page: Page, i: int, timeout: float = TIMEOUT) -> None:
    """Run cell i and wait until it is done."""
    run_cell(page, i)
    wait_done(page, i, timeout)


def kernel_idle(page: Page, lab: bool = True) -> None:
    """The kernel is up and this page is connected to it: Lab's status bar says so, or Notebook
    7's toolbar (the kernel's name) and execution indicator."""
    if lab:
        expect(page.get_by_text("flue test | Idle")).to_be_visible(timeout=TIMEOUT)
    else:
        # The toolbar names the kernel only once the page's session is connected. Until then the
        # indicator can already read idle, and a cell run then makes the front end start a kernel
        # of its own, whose new session shuts down the one it was connecting to (JupyterLab's
        # runCell calls startKernel() while hasNoKernel): the notebook's kernel is replaced.
        expect(page.locator(VISIBLE + ".jp-Toolbar-kernelName").first).to_contain_text("flue test", timeout=TIMEOUT)
        idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first
        expect(idle).to_be_attached(timeout=TIMEOUT)


def open_notebook(page: Page, path: str, *, lab: bool = True) -> None:
    """Open `path` in JupyterLab (or Notebook 7) and wait for its kernel."""
    page.goto(f"{URL}/lab/tree/{path}" if lab else f"{URL}/notebooks/{path}")
    expect(page.locator(VISIBLE + ".jp-Notebook .jp-Cell").first).to_be_visible(timeout=TIMEOUT)
    kernel_idle(page, lab)


def wait_for(page: Page, what: str, ok: Any, seconds: float = 60) -> None:
    """Pump the page's events (the routed socket is served meanwhile) until `ok()`."""
    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        page.wait_for_timeout(100)


def save(page: Page, path: str, holds: str = "") -> None:
    """Ctrl+S with the notebook selected, until nb/`path` on disk is written again (holding
    `holds`) and the page has no unsaved work. A fixed sleep was not enough on a loaded machine:
    the page hears of the save after the file is written (a tab closed or a page left in between
    asks "Save your work?"), and an output the kernel rewrote just after the save (a chat's copy)
    leaves the page unsaved again: then it saves again, as a person would."""
    file = OUT / "nb" / path
    deadline = time.monotonic() + TIMEOUT / 1000
    while True:
        before = file.stat().st_mtime_ns
        page.locator(VISIBLE + ".jp-Cell .jp-InputPrompt").first.click()  # command mode, focus in the notebook
        page.keyboard.press("Control+s")
        wait_for(page, f"{path} saved" + (f" with {holds!r}" if holds else ""),
                 lambda before=before: file.stat().st_mtime_ns != before and holds in file.read_text(),
                 max(0.0, deadline - time.monotonic()))  # fmt: skip
        try:
            page.wait_for_function("() => !window.jupyterapp.status.isDirty", timeout=3_000)
            return
        except PlaywrightError:
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} kept changing after each save for {TIMEOUT / 1000:.0f} s") from None
            step(f"{path}: the page had unsaved work again after the save; saving again")


def send(chat: Any, text: str) -> None:
    """Type `text` into a chat's input and press Enter."""
    box = chat.locator(".flue-input textarea")
    box.fill(text)
    box.press("Enter")


def drive(
    scenarios: list[tuple[str, Callable[..., None]]], *, pages: int = 1, width: int = 1280, height: int = 1400
) -> int:
    """Run each (name, scenario) in Chromium, each given the same `pages` pages; 0 when all
    passed, else 1 (and OUT/failure.png, or failure-a.png, failure-b.png … for several pages).
    A page error naming flue fails the run too."""
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )  # fmt: skip
        opened = [browser.new_page(viewport={"width": width, "height": height}) for _ in range(pages)]
        errors: list[str] = []
        for page in opened:
            # Clicks and fills wait as long as the checks do, not Playwright's 30 s: on a loaded
            # machine (parallel tests) Lab can take that long to lay a cell out.
            page.set_default_timeout(TIMEOUT)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            for name, scenario in scenarios:
                step(f"--- {name}")
                scenario(*opened)
        except Exception:  # noqa: BLE001 - any failure: screenshot, report, exit 1
            names = ["failure.png"] if pages == 1 else [f"failure-{chr(97 + i)}.png" for i in range(pages)]
            for page, shot in zip(opened, names, strict=True):
                page.screenshot(path=str(OUT / shot), full_page=True)
            traceback.print_exc()
            print(f"FAILED; screenshots: {', '.join(str(OUT / n) for n in names)}; page errors: {errors}", flush=True)
            return 1
        finally:
            browser.close()
    flue_errors = [e for e in errors if "flue" in e.lower()]
    if flue_errors:
        print(f"FAILED: page errors from the widget: {flue_errors}", flush=True)
        return 1
    step("all steps passed")
    return 0
