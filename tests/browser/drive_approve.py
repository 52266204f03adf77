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
import time
import traceback
from pathlib import Path

from drive_chat import TIMEOUT, cell, kernel_idle, run_cell, send, wait_done
from playwright.sync_api import Page, expect, sync_playwright

URL, OUT, CHROMIUM = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
started = time.monotonic()


def step(text: str) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {text}", flush=True)


def chat_of(page: Page, path: str):
    """Open `path` in a Lab workspace of its own (so the page shows that notebook alone), run its
    setup and chat cells; its chat."""
    page.goto(f"{URL}/lab/workspaces/{path.split('.')[0]}/tree/{path}")
    expect(page.locator(".jp-Notebook .jp-Cell").first).to_be_visible(timeout=TIMEOUT)
    kernel_idle(page)
    run_cell(page, 0)
    wait_done(page, 0)
    run_cell(page, 1)
    chat = cell(page, 1).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    wait_done(page, 1)
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


def main() -> int:
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )  # fmt: skip
        pages = [browser.new_page(viewport={"width": 1280, "height": 1400}) for _ in range(2)]
        errors: list[str] = []
        for page in pages:
            page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            steps(*pages)
        except Exception:  # noqa: BLE001 - any failure: screenshots, report, exit 1
            for name, page in zip("ab", pages):
                page.screenshot(path=str(OUT / f"failure-{name}.png"), full_page=True)
            traceback.print_exc()
            print(f"FAILED; screenshots: {OUT}/failure-a.png, failure-b.png; page errors: {errors}", flush=True)
            return 1
        finally:
            browser.close()
    flue_errors = [e for e in errors if "flue" in e.lower()]
    if flue_errors:
        print(f"FAILED: page errors from the widget: {flue_errors}", flush=True)
        return 1
    step("all steps passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
