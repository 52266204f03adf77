"""Drive the chat widget in JupyterLab (and Notebook 7) with Playwright; run by test_chat_browser.

Runs in `.venv-browser` (Playwright lives there, not in the main venv). Each step prints a line;
the first failure saves a screenshot in OUT and exits non-zero with what was expected.

    drive_chat.py URL OUT CHROMIUM [README_PNG]
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from _page import OUT, TIMEOUT, cell, drive, kernel_idle, open_notebook, run_cell, save, send, step, wait_done
from playwright.sync_api import Page, expect

README_PNG = Path(sys.argv[4]) if len(sys.argv) > 4 else None


def whole(page: Page, lab: bool) -> None:
    """Every step, in JupyterLab (`lab`) or Notebook 7; Notebook 7's copy of the notebook is in
    `seven/`, so its kernel has a store of its own."""
    tag, path = ("lab", "chat.ipynb") if lab else ("nb7", "seven/chat.ipynb")
    open_notebook(page, path, lab=lab)
    step("notebook open, kernel idle")

    run_cell(page, 0)
    wait_done(page, 0)
    step("setup cell ran")

    # 1. A %%flue cell draws its run: streamed text, a bash and a python card, the outcome.
    run_cell(page, 1)
    view = cell(page, 1).locator(".flue-chat")
    expect(view.locator(".flue-answer").first).to_contain_text("Let me check", timeout=TIMEOUT)
    step("cell view: streamed text appeared while the cell ran")
    # While `python` sleeps (5 s: the window must outlast a loaded machine), the live view shows the cards.
    expect(view.locator(".flue-tool", has_text="bash")).to_contain_text("echo hello from bash", timeout=TIMEOUT)
    expect(view.locator(".flue-stop")).to_be_hidden()  # a blocking cell stops with the kernel's ■
    wait_done(page, 1)
    # Settled, the widget gives way to a static bundle a saved notebook can show (issue 19.1).
    static = cell(page, 1).locator(".flue-static")
    expect(static).to_contain_text("echo hello from bash", timeout=TIMEOUT)
    expect(static).to_contain_text("answer = 6 * 7")
    expect(static.locator("h3")).to_have_text("Result")
    expect(static).to_contain_text("✓ completed")
    expect(cell(page, 1).locator(".flue-chat")).to_have_count(0)
    step("cell view: text and cards live, then the static bundle (bash, python, answer, ✓ completed)")

    # 2. The chat: a message sent while the agent works is queued, then joins the live response.
    run_cell(page, 2)
    chat = cell(page, 2).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    wait_done(page, 2)
    send(chat, "work slowly")
    expect(chat.locator(".flue-state")).to_contain_text("working", timeout=TIMEOUT)
    expect(chat.locator(".flue-answer").first).to_contain_text("Loading the table", timeout=TIMEOUT)
    send(chat, "also this")  # while the agent works
    expect(chat.locator(".flue-queued")).to_contain_text("joins the live response", timeout=TIMEOUT)
    step("chat: second message queued while busy")
    expect(chat.locator(".flue-joined")).to_contain_text("also this", timeout=TIMEOUT)
    expect(chat.locator(".flue-answer").last).to_contain_text("I also saw: also this", timeout=TIMEOUT)
    expect(chat.locator(".flue-tool", has_text="python").locator(".flue-ns-added")).to_have_text(["+ rows", "+ time"])
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    step("chat: it joined at the turn boundary and the answer saw it")

    # 3. Stop aborts a long run durably.
    send(chat, "long one")
    expect(chat.locator(".flue-answer").last).to_contain_text("long5", timeout=TIMEOUT)
    chat.locator(".flue-stop").click()
    expect(chat.locator(".flue-outcome.flue-aborted")).to_contain_text("■ aborted", timeout=TIMEOUT)
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    step("chat: Stop → ■ aborted")

    # 4. Approve on an `ask` card: the run waits for the click, then the tool runs.
    send(chat, "approve me")
    card = chat.locator(".flue-tool-awaiting_approval")
    expect(card).to_contain_text("bash: echo approved-run", timeout=TIMEOUT)
    time.sleep(0.5)
    expect(chat.locator(".flue-state")).to_contain_text("working")  # still waiting for the click
    card.locator(".flue-approve").click()
    done = chat.locator(".flue-tool-ok", has_text="echo approved-run")
    expect(done).to_contain_text("approved-run", timeout=TIMEOUT)
    expect(done).to_contain_text("approved by the user")
    expect(chat.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    step("chat: Approve → the bash call ran")
    gauge = chat.locator(".flue-gauge-text")
    expect(gauge).to_contain_text("/ 200k tokens · compacts at 180k")
    if README_PNG is not None and lab:
        # The whole conversation in one picture: let the log grow instead of scrolling.
        page.add_style_tag(content=".flue-log { max-height: none !important; }")
        chat.screenshot(path=str(README_PNG))
        # Settled, a cell shows its static bundle (issue 19.1): that is the cell's picture.
        cell(page, 1).locator(".flue-static").screenshot(path=str(README_PNG.with_name("cell-view.png")))
        step(f"screenshots saved: {README_PNG} and cell-view.png")
    chat.screenshot(path=str(OUT / f"chat-{tag}.png"))

    # 5. A blocking cell stops with the kernel's interrupt (I, I): its view says aborted.
    run_cell(page, 4)
    view = cell(page, 4).locator(".flue-chat")
    expect(view.locator(".flue-answer").first).to_contain_text("long5", timeout=TIMEOUT)
    expect(view.locator(".flue-hint")).to_have_text("stop with the kernel's interrupt (■)")
    page.keyboard.press("Escape")
    page.keyboard.press("i")
    page.keyboard.press("i")
    wait_done(page, 4)
    expect(cell(page, 4).locator(".flue-static")).to_contain_text("■ aborted", timeout=TIMEOUT)
    step("cell view: the kernel's interrupt → ■ aborted")

    # 6. Every other kind of part, drawn live while another cell runs the conversation.
    run_cell(page, 5)
    wait_done(page, 5)
    run_cell(page, 6)
    wait_done(page, 6)
    run_cell(page, 7)
    wait_done(page, 7)
    gal = cell(page, 6).locator(".flue-chat")
    think = gal.locator("details.flue-think")
    expect(think).to_have_count(1, timeout=TIMEOUT)
    expect(think).not_to_have_attribute("open", "")  # collapsed
    read = gal.locator(".flue-tool", has_text="big.txt")
    read.locator("summary").first.click()
    expect(read.locator(".flue-long > summary")).to_have_text("result (7.5 KB, 400 lines, collapsed)")
    task = gal.locator(".flue-tool", has_text="check the totals")
    expect(task.locator(".flue-task")).to_contain_text("subagent reviewer")
    task.locator("summary").first.click()
    expect(task.locator(".flue-task .flue-answer")).to_have_text("The numbers add up.")
    expect(gal.locator(".flue-divider", has_text="compacted")).to_contain_text(
        re.compile(r"compacted \(manual\): [\d.]+k? → [\d.]+k? tokens")
    )
    summary = gal.locator("details.flue-sumbox")
    expect(summary).not_to_have_attribute("open", "")
    summary.locator("summary").click()
    expect(summary.locator(".flue-summary")).to_contain_text("Summarise big.txt")
    expect(gal.locator(".flue-chip")).to_have_text("resources Mounted tools: lookup")
    expect(gal.locator(".flue-outcome.flue-failed")).to_have_text("✗ failed: provider_error: the request was malformed")
    page.add_style_tag(content=".flue-log { max-height: none !important; }")
    gal.screenshot(path=str(OUT / f"gallery-{tag}.png"))
    if README_PNG is not None and lab:
        gal.screenshot(path=str(README_PNG.with_name("chat-parts.png")))
    step("chat: thinking, long result, subagent, compaction, signal chip, failure drawn")

    # 6b. Reading: a figure in its card (full size on click), markdown, a denied call, the input.
    rich_steps(page, tag, OUT / "nb" / path)

    # 7. Reload the page: the saved notebook's widgets come back from the kernel, and a new
    #    `%flue chat` redraws the whole conversation from the store.
    save(page, path)
    page.reload()
    expect(page.locator(".jp-Notebook .jp-Cell").first).to_be_visible(timeout=TIMEOUT)
    kernel_idle(page, lab)
    run_cell(page, 3)
    wait_done(page, 3)
    again = cell(page, 3).locator(".flue-chat")
    expect(again.locator(".flue-user", has_text="work slowly")).to_be_visible(timeout=TIMEOUT)
    expect(again.locator(".flue-joined")).to_contain_text("also this")
    expect(again.locator(".flue-outcome.flue-aborted")).to_have_count(1)
    expect(again.locator(".flue-tool-ok", has_text="echo approved-run")).to_contain_text("approved by the user")
    expect(again.locator(".flue-outcome.flue-completed")).to_have_count(2)
    step("reload: %flue chat redrew the history from the store")
    restored = cell(page, 2).locator(".flue-chat")
    expect(restored.locator(".flue-user", has_text="approve me")).to_be_visible(timeout=TIMEOUT)
    step("reload: the saved chat widget was restored from the kernel too")

    # 8. A long conversation opens at its newest message and follows unless scrolled up.
    run_cell(page, 11)
    wait_done(page, 11)
    run_cell(page, 12)
    wait_done(page, 12)
    long = cell(page, 12).locator(".flue-chat")
    log = long.locator(".flue-log")
    expect(long.locator(".flue-user", has_text="question 39")).to_be_visible(timeout=TIMEOUT)
    time.sleep(1.0)
    at = log.evaluate("l => [l.scrollTop, l.clientHeight, l.scrollHeight]")
    assert at[2] > 2 * at[1] and at[0] + at[1] >= at[2] - 40, f"the chat did not open at its newest message: {at}"
    long.screenshot(path=str(OUT / f"long-{tag}.png"))
    log.evaluate("l => { l.scrollTop = 0; }")
    time.sleep(0.3)
    run_cell(page, 13)  # new content arrives while the user reads the top
    wait_done(page, 13)
    expect(long.locator(".flue-user", has_text="one more")).to_be_attached(timeout=TIMEOUT)
    time.sleep(0.5)
    top = log.evaluate("l => l.scrollTop")
    assert top < 50, f"the chat scrolled away from where the user read (scrollTop {top})"
    step("long chat: opened at the newest of 40 messages; scrolled up, it stayed while new ones came")


def rich_steps(page: Page, tag: str, saved: Path) -> None:
    run_cell(page, 8)
    wait_done(page, 8)
    run_cell(page, 9)
    wait_done(page, 9)
    rich = cell(page, 9).locator(".flue-chat")
    box = rich.locator(".flue-input textarea")
    expect(box).to_have_attribute("aria-label", "Message the agent")
    expect(rich.locator(".flue-log")).to_have_attribute("role", "log")
    send(rich, "plot it")
    fig = rich.locator(".flue-tool", has_text="python").locator(".flue-fig img")
    expect(fig).to_be_visible(timeout=TIMEOUT)
    assert fig.evaluate("i => i.naturalWidth > 100 && i.getBoundingClientRect().width <= 480"), (
        "figure not drawn scaled"
    )
    code = rich.locator(".flue-tool", has_text="python").locator("code.language-python")
    expect(code).to_contain_text("plt.plot([1, 3, 2])")
    assert "\\n" not in code.inner_text(), "code shown as a JSON string"
    fig.click()
    overlay = rich.locator(".flue-overlay")
    expect(overlay).to_be_visible()
    page.screenshot(path=str(OUT / f"figure-full-{tag}.png"))
    overlay.click()
    expect(overlay).to_be_hidden()
    step("figure: drawn in the python card, scaled; full size on click")
    answer = rich.locator(".flue-answer").last
    expect(answer.locator("table td").first).to_have_text("north", timeout=TIMEOUT)
    expect(answer.locator("ul ul li").first).to_contain_text("north")
    expect(answer.locator("pre code .hljs-keyword").first).to_have_text("def")
    expect(answer.locator("a[href='https://docs.example.test/docs']")).to_have_attribute("target", "_blank")
    expect(answer.locator(".katex").first).to_be_visible()
    expect(answer.locator("img[onerror]")).to_have_count(0)  # the <img> may stay, its handler may not
    assert not page.evaluate("() => window.pwned"), "hostile HTML ran"
    expect(rich.locator(".flue-announce")).to_contain_text("answer:")
    step("markdown: table, nested list, highlighted code, link, math; hostile HTML removed; answer announced")

    # Escape leaves the input; Ctrl+S saves the notebook while the input has focus.
    box.click()
    box.press("Escape")
    assert not box.evaluate("b => b === document.activeElement"), "Escape did not leave the input"
    box.click()
    box.type("draft")
    before = saved.stat().st_mtime_ns
    box.press("Control+s")
    deadline = time.monotonic() + 10
    while saved.stat().st_mtime_ns == before:  # the file on disk is written: it was saved
        assert time.monotonic() < deadline, "Ctrl+S in the chat's input did not save the notebook"
        time.sleep(0.2)
    expect(box).to_have_value("draft")
    box.fill("")
    step("input: Escape leaves it, Ctrl+S saved the notebook")

    # A message sent while a user cell runs shows at once as waiting for the kernel.
    run_cell(page, 10)
    # Read in the same tick as the key press: the echo must not wait for any answer from the
    # kernel (this ipykernel may admit the message at once, or only when the cell ends).
    seen = box.evaluate(
        """b => { b.value = "remove it";
                  b.dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", bubbles: true}));
                  const w = b.closest(".flue-chat").querySelector(".flue-waiting");
                  return w ? w.textContent : ""; }"""
    )
    assert "remove it" in seen and "waiting for the kernel" in seen, f"no local echo: {seen!r}"
    rich.screenshot(path=str(OUT / f"waiting-{tag}.png"))
    wait_done(page, 10, timeout=TIMEOUT)
    expect(rich.locator(".flue-waiting")).to_have_count(0, timeout=TIMEOUT)
    step("chat: a message sent while a cell ran showed 'waiting for the kernel' until admitted")

    card = rich.locator(".flue-tool-awaiting_approval")
    expect(card.locator(".flue-wait")).to_have_text(re.compile(r"\d+ s"), timeout=TIMEOUT)
    # It counts up while the question waits (polled: a loaded machine delays the page's timer).
    expect(card.locator(".flue-wait")).to_have_text(re.compile(r"^([2-9]|\d\d+) s"), timeout=TIMEOUT)
    card.locator(".flue-deny").click()
    denied = rich.locator(".flue-tool-denied")
    expect(denied).to_contain_text("denied by the user", timeout=TIMEOUT)
    expect(rich.locator(".flue-tool-error")).to_have_count(0)
    expect(rich.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    rich.screenshot(path=str(OUT / f"rich-{tag}.png"))
    step("approval: the card said how long it waited; Deny drew the call as denied")


def notebook7(page: Page) -> None:
    # Notebook 7 once asked which kernel to start for this notebook (a loaded fresh-clone run):
    # a person takes the preferred one, the kernel the notebook names. Only here: the saved-notebook
    # test answers that dialog itself ("No Kernel").
    asks = page.locator(".jp-Dialog").filter(has_text="Select Kernel")
    page.add_locator_handler(asks, lambda dialog: dialog.get_by_role("button", name="Select").click())
    open_notebook(page, "nb7.ipynb", lab=False)
    run_cell(page, 0)
    wait_done(page, 0)
    run_cell(page, 1)
    wait_done(page, 1)
    view = cell(page, 1).locator(".flue-static")  # settled: the static bundle (issue 19.1)
    expect(view).to_contain_text("echo hello from bash", timeout=TIMEOUT)
    expect(view).to_contain_text("✓ completed")
    run_cell(page, 2)
    chat = cell(page, 2).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    send(chat, "approve me")
    chat.locator(".flue-approve").click(timeout=TIMEOUT)
    expect(chat.locator(".flue-tool-ok", has_text="echo approved-run")).to_be_visible(timeout=TIMEOUT)
    expect(chat.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    chat.screenshot(path=str(OUT / "notebook7.png"))
    step("Notebook 7: cell view and chat (Approve) work")
    # A fresh chat names its model's window before the first reply; at 600 px the gauge line
    # wraps rather than ending in "…" (issue 33.8).
    page.set_viewport_size({"width": 600, "height": 1200})
    run_cell(page, 3)
    wait_done(page, 3)
    fresh = cell(page, 3).locator(".flue-chat")
    expect(fresh.locator(".flue-title")).to_contain_text("claude-sonnet-4-6", timeout=TIMEOUT)
    expect(fresh.locator(".flue-gauge-text")).to_contain_text("0 / 1M tokens")
    cut = fresh.locator(".flue-gauge-text").evaluate("g => g.scrollWidth > g.clientWidth + 1")
    assert not cut, "the gauge line is cut at 600 px"
    send(chat, "approve me")  # and the other chat still works at this width
    chat.locator(".flue-approve").click(timeout=TIMEOUT)
    expect(chat.locator(".flue-outcome.flue-completed")).to_have_count(2, timeout=TIMEOUT)
    page.screenshot(path=str(OUT / "notebook7-600.png"))
    step("Notebook 7: a fresh chat names its window (1M); at 600 px the gauge is not cut")


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab", lambda page: whole(page, True)), ("Notebook 7", lambda page: whole(page, False)),
                    ("Notebook 7: a fresh chat, 600 px", notebook7)]))  # fmt: skip
