"""The changes panel in the chat, in JupyterLab then in Notebook 7 (one server): collapsed after a
run, opened to its diffs, one Undo click restores the cell the agent edited in the open tab and
another the file it edited; saved, the kernel shut down and the notebook reopened, the panel's
record is still there to read.

Run by test_changes_browser (in `.venv-browser`, where Playwright lives). Each step prints a
line; the first failure saves a screenshot in OUT and exits 1.

    drive_changes.py URL OUT CHROMIUM
"""

from __future__ import annotations

import re
import sys
from typing import Any

from _page import OUT, TIMEOUT, URL, VISIBLE, cell, drive, open_notebook, run_done, save, send, step
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect

EDITED = "print(f'{len(rows)} rows kept')"
ORIGINAL = "print(len(rows))"


def editor(page: Page, i: int):
    """The text in cell i's editor."""
    return cell(page, i).locator(".jp-InputArea-editor")


def shot(page: Page, top: Any, bottom: Any, name: str) -> None:
    """One picture from the top of `top` down to the bottom of `bottom` (both scrolled into view)."""
    top.evaluate("e => e.scrollIntoView({block: 'start'})")
    a, b = top.bounding_box(), bottom.bounding_box()
    assert a is not None and b is not None, f"nothing to picture for {name}"
    left, right = min(a["x"], b["x"]), max(a["x"] + a["width"], b["x"] + b["width"])
    clip = {"x": left, "y": a["y"], "width": right - left, "height": b["y"] + b["height"] - a["y"]}
    page.screenshot(path=str(OUT / name), clip=clip)


def shut_down(page: Page) -> None:
    """The kernel shut down from the Kernel menu, as a person would."""
    page.get_by_role("menuitem", name="Kernel", exact=True).click()
    page.get_by_role("menuitem", name=re.compile("Shut Down Kernel")).click()
    try:  # a front end may ask first
        page.locator(".jp-Dialog .jp-mod-accept").click(timeout=3_000)
    except PlaywrightError:
        pass
    expect(page.get_by_text(re.compile(r"^No Kernel")).first).to_be_visible(timeout=TIMEOUT)


def whole(page: Page, lab: bool) -> None:
    """Every step, in JupyterLab (`lab`) or Notebook 7, whose copy of the notebook is in `seven/`
    (its kernel has a store and a workspace of its own)."""
    tag, path = ("lab", "review.ipynb") if lab else ("nb7", "seven/review.ipynb")
    where = "JupyterLab" if lab else "Notebook 7"
    if not lab:  # as drive_chat: a front end that asks which kernel gets the one the notebook names
        asks = page.locator(".jp-Dialog").filter(has_text="Select Kernel")
        page.add_locator_handler(asks, lambda dialog: dialog.get_by_role("button", name="Select").click())
    open_notebook(page, path, lab=lab)
    run_done(page, 0)
    run_done(page, 1)
    chat = cell(page, 1).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    step(f"{where}: {path} open, the chat of `tidy` idle")

    send(chat, "tidy up")
    expect(chat.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    expect(editor(page, 3)).to_contain_text(EDITED, timeout=TIMEOUT)  # the agent's edit_cell, in the tab
    panel = chat.locator(".flue-changes").last
    expect(panel.locator("summary")).to_contain_text("3 changes: 1 cell, 1 file, 1 variable", timeout=TIMEOUT)
    expect(panel).not_to_have_attribute("open", "")
    expect(panel.locator(".flue-chg-body")).to_be_hidden()
    expect(chat.locator(".flue-rewind")).to_have_count(3)  # one per tool card with effects
    chat.screenshot(path=str(OUT / f"panel-collapsed-{tag}.png"))
    step(f"{where}: the run edited cell 4 in the tab and ends with the panel as one line (panel-collapsed-{tag}.png)")

    panel.locator("summary").click()
    file_item = panel.locator('.flue-chg[data-item="1.1"]')
    expect(file_item.locator(".flue-diff .flue-del")).to_contain_text("threshold = 10")
    expect(file_item.locator(".flue-diff .flue-add")).to_contain_text("threshold = 20  # stricter")
    expect(file_item.locator(".flue-diff .hljs-number").first).to_be_visible()  # coloured as python
    expect(panel.locator('.flue-chg[data-item="2.1"]')).to_contain_text("rows: list len 3 → len 1")
    cell_item = panel.locator('.flue-chg[data-item="4.1"]')
    expect(cell_item).to_contain_text("cell c3")
    expect(cell_item.locator(".flue-diff .flue-del")).to_contain_text(ORIGINAL)
    expect(cell_item.locator(".flue-diff .flue-add")).to_contain_text(EDITED)
    chat.screenshot(path=str(OUT / f"panel-open-{tag}.png"))
    step(
        f"{where}: opened: the file's and the cell's diffs, coloured, and the variable's summary (panel-open-{tag}.png)"
    )

    expect(cell(page, 3).locator(".flue-agent-label")).to_have_count(1)  # the tab marks the agent's edit
    cell_item.locator(".flue-undo").click()
    expect(cell_item.locator(".flue-undone")).to_have_text("undone", timeout=TIMEOUT)
    expect(editor(page, 3)).to_have_text(re.compile(r"^\s*" + re.escape(ORIGINAL) + r"\s*$"), timeout=TIMEOUT)
    expect(cell(page, 3).locator(".flue-agent-label")).to_have_count(0)  # undone: the user's cell again
    said = panel.locator(".flue-chg-said")
    expect(said).to_contain_text("Undone 1 item")
    expect(said).to_contain_text("in your open tab")
    expect(panel.locator("summary")).to_contain_text("(1 undone)")
    expect(file_item.locator(".flue-undo")).to_be_visible()  # the others stay
    shot(page, panel, cell(page, 3), f"cell-undone-{tag}.png")  # the panel, and the cell as the tab shows it
    step(f"{where}: one Undo click: cell 4 shows its old source in the tab, the panel says so (cell-undone-{tag}.png)")

    file_item.locator(".flue-undo").click()
    expect(file_item.locator(".flue-undone")).to_have_text("undone", timeout=TIMEOUT)
    expect(panel.locator("summary")).to_contain_text("(2 undone)")
    chat.screenshot(path=str(OUT / f"panel-undone-{tag}.png"))
    step(f"{where}: Undo on the file: clean.py is back on disk (panel-undone-{tag}.png)")

    # The chat's copy under it is rewritten after the click shows: saved once it has both undos.
    expect(cell(page, 1).locator(".flue-static .flue-chg", has_text="[undone]")).to_have_count(2)
    save(page, path)
    shut_down(page)
    save(page, path)  # with the chat's last copy, written as the kernel went
    page.goto(f"{URL}/lab/tree/{path}" if lab else f"{URL}/notebooks/{path}")
    copy = cell(page, 1).locator(".flue-static .flue-changes")
    expect(copy).to_be_visible(timeout=TIMEOUT)
    expect(copy.locator("summary")).to_contain_text("3 changes: 1 cell, 1 file, 1 variable")
    copy.locator("summary").click()
    lines = copy.locator(".flue-chg")
    expect(lines).to_have_count(3)
    expect(lines.nth(0)).to_contain_text("clean.py")
    expect(lines.nth(0)).to_contain_text("[undone]")
    expect(lines.nth(1)).to_contain_text("rows: list len 3 → len 1")
    expect(lines.nth(1)).not_to_contain_text("[undone]")
    expect(lines.nth(2)).to_contain_text("cell c3: edited")
    expect(lines.nth(2)).to_contain_text("[undone]")
    expect(copy).to_contain_text("%flue undo 2.1")  # how to undo what is left, in a text front end
    expect(editor(page, 3)).to_have_text(re.compile(r"^\s*" + re.escape(ORIGINAL) + r"\s*$"))
    expect(page.locator(VISIBLE).get_by_text("Error displaying widget")).to_have_count(0)
    shot(page, cell(page, 1), cell(page, 3), f"reopened-{tag}.png")
    step(f"{where}: saved, kernel shut down, reopened: the panel's record reads as it was left (reopened-{tag}.png)")


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab", lambda page: whole(page, True)), ("Notebook 7", lambda page: whole(page, False))]))
