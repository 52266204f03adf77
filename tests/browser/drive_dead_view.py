"""Drive dead kernels, joined cells and the stdin prompt in JupyterLab and Notebook 7; run by
test_dead_view_browser (in `.venv-browser`, where Playwright lives).

Each step prints a line and leaves a screenshot in OUT; the first failure exits non-zero.

    drive_dead_view.py URL OUT CHROMIUM NB_DIR
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

from _page import OUT, TIMEOUT, cell, drive, kernel_idle, open_notebook, run_cell, run_done, send, step, wait_done
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect

NB_DIR = Path(sys.argv[4])
# The cells of dead.ipynb and dead7.ipynb (test_dead_view_browser.CELLS).
SETUP, CHAT, SLOW_CELL, AFTER_KILL, JOIN_CHAT, JOIN_CELL, ASK_CELL = range(7)


def shot(page: Page, name: str, text: str) -> None:
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
    step(f"{text} ({name}.png)")


def kernel_menu(page: Page, item: str) -> None:
    page.get_by_role("menuitem", name="Kernel", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(item)).first.click()


def joined_cell(page: Page, tag: str) -> None:
    """A `%%flue` cell whose message joins a running chat response shows that answer."""
    run_done(page, JOIN_CHAT)
    chat = cell(page, JOIN_CHAT).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    send(chat, "work slowly")
    expect(chat.locator(".flue-answer").first).to_contain_text("Working on it", timeout=TIMEOUT)
    run_cell(page, JOIN_CELL)  # while the chat's run works
    wait_done(page, JOIN_CELL)
    static = cell(page, JOIN_CELL).locator(".flue-static")
    expect(static).to_contain_text("I also saw: also this", timeout=TIMEOUT)
    expect(chat.locator(".flue-answer").last).to_contain_text("I also saw: also this", timeout=TIMEOUT)
    shot(page, f"joined-{tag}", "a %%flue cell that joined the chat's running response shows its answer")


def stdin_prompt(page: Page, tag: str) -> None:
    """The stdin approval prompt leaves no box and no echo after an answer or an interrupt."""
    here = cell(page, ASK_CELL)
    run_cell(page, ASK_CELL)
    box = here.locator(".jp-Stdin input")
    expect(box).to_be_visible(timeout=TIMEOUT)
    expect(here.locator(".jp-Stdin")).to_contain_text("flue: allow bash: echo ran-after-yes? [y/N]")
    expect(here.locator(".flue-chat")).to_contain_text("answer in the prompt under the cell")
    shot(page, f"stdin-asked-{tag}", "stdin prompt under the cell, the card points to it")
    box.fill("y")
    box.press("Enter")
    wait_done(page, ASK_CELL)
    expect(here.locator(".flue-static")).to_contain_text("The command ran", timeout=TIMEOUT)
    expect(here.locator(".jp-Stdin")).to_have_count(0)
    expect(here.locator(".jp-OutputArea")).not_to_contain_text("flue: allow")
    shot(page, f"stdin-answered-{tag}", "answered y: the call ran; no box, no echo left")

    run_cell(page, ASK_CELL)
    expect(box).to_be_visible(timeout=TIMEOUT)
    kernel_menu(page, "Interrupt Kernel")
    wait_done(page, ASK_CELL)
    expect(here.locator(".flue-static")).to_contain_text("■ aborted", timeout=TIMEOUT)
    time.sleep(1.0)
    expect(here.locator(".jp-Stdin")).to_have_count(0)
    expect(here.locator(".jp-OutputArea")).not_to_contain_text("flue: allow")
    shot(page, f"stdin-interrupted-{tag}", "interrupted at the prompt: ■ aborted; no box, no echo left")


def stalled(page: Page, tag: str) -> None:
    """A kernel that stops beating (SIGSTOP) is called gone after 20 s, and a message waiting
    goes back into the input; when it beats again (SIGCONT) the view comes back, and the
    message the kernel then takes leaves the input with a line saying it was sent after all."""
    chat = cell(page, CHAT).locator(".flue-chat")
    box = chat.locator(".flue-input textarea")
    pid = int((NB_DIR / "kernel.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        send(chat, "hello")
        note = chat.locator(".flue-gone-note")
        expect(note).to_contain_text("no word from the kernel for 20 s", timeout=40_000)
        expect(chat.locator(".flue-state")).to_have_text("kernel gone")
        expect(box).to_have_value("hello")
        expect(chat.locator(".flue-error")).to_contain_text("not sent: the kernel went silent before it took")
        shot(page, f"stalled-{tag}", "SIGSTOP: after 20 s without a beat the chat says so; the message is back")
    finally:
        os.kill(pid, signal.SIGCONT)
    expect(note).to_be_empty(timeout=TIMEOUT)
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    expect(chat.locator(".flue-error")).to_have_text("the kernel was only slow: your message was sent after all")
    expect(box).to_have_value("")
    expect(chat.locator(".flue-answer").last).to_have_text("echo: hello", timeout=TIMEOUT)
    shot(page, f"resumed-{tag}", "SIGCONT: beating again, the chat is back and the message was sent once")


def killed(page: Page, tag: str, lab: bool) -> None:
    """SIGKILL while a chat run works, a cell runs and a message waits: every view says so."""
    chat = cell(page, CHAT).locator(".flue-chat")
    send(chat, "work slowly")
    expect(chat.locator(".flue-answer").last).to_contain_text("Working on it", timeout=TIMEOUT)
    run_cell(page, SLOW_CELL)  # a blocking cell: the kernel takes no chat message meanwhile
    view = cell(page, SLOW_CELL).locator(".flue-chat")
    expect(view.locator(".flue-answer").first).to_contain_text("Starting the slow part", timeout=TIMEOUT)
    # Stopped first, so the kernel cannot take the message (ipykernel may take a comm message
    # while a cell runs): it waits in the chat, then the kernel dies under it.
    pid = int((NB_DIR / "kernel.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    send(chat, "are you there?")
    time.sleep(1.0)
    expect(chat.locator(".flue-waiting")).to_contain_text("are you there?waiting for the kernel…")
    os.kill(pid, signal.SIGKILL)
    began = time.monotonic()
    note = chat.locator(".flue-gone-note")
    expect(note).not_to_be_empty(timeout=TIMEOUT)
    step(f"SIGKILL: the chat said {note.inner_text()!r} after {time.monotonic() - began:.1f} s")
    # The frontend's own "the kernel appears to have died" dialog holds the focus: a person
    # dismisses it before typing on (a key pressed now would go to its button).
    dialog = page.locator(".jp-Dialog")
    try:
        said = dialog.locator(".jp-Dialog-header").inner_text(timeout=10_000)
        dialog.locator(".jp-mod-accept").click()
        step(f"dismissed the frontend's dialog {said!r}")
    except PlaywrightError:
        step("the frontend showed no dialog")
    expect(note).to_have_text("the kernel restarted — re-run this cell to chat")
    expect(chat.locator(".flue-state")).to_have_text("kernel restarted")
    expect(chat.locator(".flue-stop")).to_be_disabled()
    expect(chat.locator(".flue-running")).to_have_count(0)
    expect(chat.locator(".flue-outcome.flue-gone")).to_contain_text("the kernel went away")
    box = chat.locator(".flue-input textarea")
    expect(box).to_have_value("are you there?")  # back in the input, not swallowed
    expect(chat.locator(".flue-error")).to_contain_text("not sent: the kernel is gone")
    expect(chat.locator(".flue-waiting")).to_have_count(0)
    expect(view.locator(".flue-gone-note")).to_have_text("the kernel restarted — re-run this cell to chat")
    expect(view.locator(".flue-running")).to_have_count(0)
    box.fill("are you there? still?")
    box.press("Enter")
    expect(box).to_have_value("are you there? still?")  # a dead view keeps what is typed
    expect(chat.locator(".flue-error")).to_have_text(
        "not sent: the kernel is gone; re-run this cell to chat (your text stays here)"
    )
    shot(page, f"killed-{tag}", "SIGKILL: the chat and the cell view say the kernel restarted; the message is back")

    kernel_idle(page, lab)
    run_done(page, SETUP)
    run_done(page, AFTER_KILL, timeout=120_000)  # takes the killed cell's run over and recovers it
    after = cell(page, AFTER_KILL).locator(".flue-static")
    expect(after).to_contain_text("Finished the slow part", timeout=TIMEOUT)
    expect(after).to_contain_text("echo: and now?")
    shot(page, f"recovered-{tag}", "after SIGKILL, the next cell shows the recovered answer and its own")
    run_done(page, CHAT)
    again = cell(page, CHAT).locator(".flue-chat")
    expect(again.locator(".flue-input textarea")).to_have_value("are you there? still?")
    expect(again.locator(".flue-error")).to_contain_text("back in the input")
    expect(again.locator(".flue-user", has_text="work slowly")).to_be_visible(timeout=TIMEOUT)
    expect(again.locator(".flue-user", has_text="are you there?")).to_have_count(0)  # never sent
    shot(page, f"rerun-{tag}", "the re-run chat starts with the unsent message in its input")

    kernel_menu(page, "Restart Kernel")
    page.locator(".jp-Dialog .jp-mod-accept").click()
    kernel_idle(page, lab)
    time.sleep(2.0)
    if again.count():  # the widget output was not retired in time: the view itself says so
        expect(again.locator(".flue-gone-note")).to_have_text("the kernel restarted — re-run this cell to chat")
        how = "the view says the kernel restarted"
    else:  # retired by the shutdown hook: the readable copy is left
        expect(cell(page, CHAT).locator(".flue-static")).to_contain_text("work slowly")
        how = "the view gave way to its static copy"
    expect(cell(page, CHAT).locator(".flue-state", has_text="working")).to_have_count(0)
    shot(page, f"restarted-{tag}", f"restart from the menu: {how}")


def scenario(path: str, tag: str, lab: bool):  # noqa: ANN201 - a drive() scenario
    def go(page: Page) -> None:
        open_notebook(page, path, lab=lab)
        run_done(page, SETUP)
        run_done(page, CHAT)
        expect(cell(page, CHAT).locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
        joined_cell(page, tag)
        stdin_prompt(page, tag)
        stalled(page, tag)
        killed(page, tag, lab)

    return go


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab", scenario("dead.ipynb", "lab", True)),
                    ("Notebook 7", scenario("dead7.ipynb", "nb7", False))]))  # fmt: skip
