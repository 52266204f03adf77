"""Drive the chat's Stop on an outside MCP call in JupyterLab and Notebook 7; run by test_serve_stop_browser.

Runs in `.venv-browser` (Playwright); the MCP client runs in the main venv (`FLUE_MAIN_PYTHON`,
`_mcp_call.py`). In each frontend: `%flue serve -c outside`, `%flue chat -c outside`, an outside
`python` call that sleeps 30 s, a click on the chat's Stop; the call must end within a couple of
seconds, the client get an error saying the user stopped it, and a user cell run next be untouched.

    drive_serve_stop.py URL OUT CHROMIUM
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from _page import TIMEOUT, cell, drive, open_notebook, run_cell, step, wait_done
from playwright.sync_api import Page, expect

MAIN_PYTHON = os.environ["FLUE_MAIN_PYTHON"]
CLIENT = str(Path(__file__).with_name("_mcp_call.py"))
STOP_WITHIN = 3.0
"""Seconds from the click to the client's answer (the brief: a second or two; slack for 2 shared cores)."""


def serve_and_stop(page: Page, where: str) -> None:
    run_cell(page, 0)
    wait_done(page, 0)
    out = cell(page, 0).locator(".jp-OutputArea-output").first
    expect(out).to_contain_text("token (shown once)", timeout=TIMEOUT)
    shown = out.inner_text()
    url = re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", shown)
    token = re.search(r"token \(shown once\): (\S+)", shown)
    assert url and token, shown
    run_cell(page, 1)
    chat = cell(page, 1).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    wait_done(page, 1)
    step(f"{where}: serving, chat on `outside` open")

    client = subprocess.Popen(
        [MAIN_PYTHON, CLIENT, url[1], token[1], "import time\nslept = 'no'\ntime.sleep(30)\nslept = 'yes'"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        card = chat.locator(".flue-tool-running", has_text="time.sleep(30)")
        expect(card).to_be_visible(timeout=TIMEOUT)
        time.sleep(1.0)  # the code is sleeping on the kernel's main thread now
        expect(chat.locator(".flue-stop")).to_be_enabled()
        clicked = time.time()
        chat.locator(".flue-stop").click()
        out_text, err_text = client.communicate(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 0, err_text[-2000:]
    result = json.loads(out_text)
    assert result["is_error"], result
    assert "The user stopped this call" in result["text"], result
    answered = result["returned_at"] - clicked
    assert answered < STOP_WITHIN, f"the client got its answer {answered:.1f} s after Stop"
    expect(chat.locator(".flue-outcome.flue-aborted").last).to_contain_text("■ aborted", timeout=TIMEOUT)
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    expect(chat.locator(".flue-error")).to_have_text("")
    step(f"{where}: Stop ended the 30 s call {answered:.2f} s after the click; the client was told")

    run_cell(page, 2)
    wait_done(page, 2)
    user = cell(page, 2).locator(".jp-OutputArea")
    expect(user).to_contain_text("user cell untouched 42 no")
    assert "KeyboardInterrupt" not in user.inner_text()
    step(f"{where}: the next user cell ran untouched")


def lab(page: Page) -> None:
    open_notebook(page, "serve.ipynb")
    serve_and_stop(page, "JupyterLab")


def notebook7(page: Page) -> None:
    open_notebook(page, "nb7.ipynb", lab=False)
    serve_and_stop(page, "Notebook 7")


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab", lab), ("Notebook 7", notebook7)]))
