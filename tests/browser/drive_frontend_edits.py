"""Drive JupyterLab, then Notebook 7, without collaboration: the agent edits the open tab.

Run by test_frontend_edits_browser.py with `.venv-browser`'s Playwright, on one server: JupyterLab
opens `fix.ipynb`, Notebook 7 its copy `seven/fix.ipynb` (a kernel and store of its own). Cells: 0
setup, 1 `x = 1` (c1), 2 `y = 2` (c2), 3 the chat, 4 `w = 4` (c4), 5 a `%%flue` cell. Each chat
message names a plan of the scripted agent. Then, through the notebook's kernel (a kernel client,
as the tools call it), with the events socket between server and page routed through Playwright:
an edit the page receives only after the kernel's timeout (a tab asleep) is refused by the page,
not applied late; the page reloaded while an edit waits leaves the saved (old) state, and the
next edit lands (new state); with the notebook's tab closed the kernel hears so at once. Each step
prints a line; the first failure saves OUT/failure.png and exits non-zero.

    drive_frontend_edits.py URL OUT CHROMIUM
"""

from __future__ import annotations

import json
import re
import sys
import threading
import urllib.request
from typing import Any

from _page import OUT, TIMEOUT, URL, VISIBLE, drive, kernel_idle, open_notebook, run_done, save, send, step, wait_for
from playwright.sync_api import Page, WebSocketRoute, expect

OP_TIMEOUT = 5.0
"""The kernel's timeout for one front-end operation in the timeout steps (the default is 10 s)."""
PROBE = 3.4
"""The server's longest wait for tabs to answer its probe (PROBE_TIMEOUT + PROBE_WINDOW)."""


def by_source(page: Page, text: str) -> Any:
    """The cells of the notebook in view whose editor shows exactly `text` (its lines are matched
    with or without the line breaks: an editor's text content has none)."""
    lines = r"\s*".join(re.escape(line) for line in text.split("\n"))
    exact = re.compile(r"^\s*" + lines + r"\s*$")
    return page.locator(VISIBLE + ".jp-Notebook .jp-Cell", has=page.locator(".jp-InputArea-editor", has_text=exact))


def sources(page: Page) -> list[str]:
    return [s.strip() for s in page.locator(VISIBLE + ".jp-Notebook .jp-Cell .jp-InputArea-editor").all_inner_texts()]


def ask(chat: Any, text: str, *, approve: bool = False) -> None:
    """Send `text` (a plan's name), approve its edit when asked, and wait for the agent's answer."""
    send(chat, text)
    if approve:
        card = chat.locator(".flue-tool-awaiting_approval")
        expect(card).to_be_visible(timeout=TIMEOUT)
        card.locator(".flue-approve").click()
    expect(chat.locator(".flue-answer", has_text=f"{text}: done")).to_have_count(1, timeout=TIMEOUT)


def marked(page: Page, text: str, what: str) -> None:
    """The cell showing `text` carries the agent's label, whose title says what it did."""
    label = by_source(page, text).locator(".flue-agent-label")
    expect(label).to_have_text("flue agent", timeout=TIMEOUT)
    expect(label).to_have_attribute("title", re.compile(f"^flue agent {what} this cell at "))


class Events:
    """The page's events socket, routed: the server's flue requests of one op can be held back.
    (The page answers by `POST api/events`, watched for its 'expired' answers.)"""

    def __init__(self, page: Page) -> None:
        self.hold_op: str | None = None
        self.held: list[str] = []
        self.expired = 0  # answers saying the page got a request past its deadline
        self._to_page: Any = None
        page.route_web_socket(re.compile(r".*/api/events/subscribe.*"), self._route)
        page.on("request", self._answer)

    def _answer(self, request: Any) -> None:
        if request.method == "POST" and request.url.split("?")[0].endswith("/api/events"):
            body = (request.post_data or "").replace(" ", "")
            self.expired += '"expired":true' in body

    def _route(self, ws: WebSocketRoute) -> None:
        server = ws.connect_to_server()
        self._to_page = ws

        def from_server(message: str | bytes) -> None:
            if self.hold_op is not None and isinstance(message, str):
                event = json.loads(message)
                if str(event.get("schema_id", "")).endswith("frontend-request/v1") and event.get("op") == self.hold_op:
                    self.held.append(message)
                    return
            ws.send(message)

        server.on_message(from_server)
        ws.on_message(server.send)

    def release(self) -> None:
        """Hand the held requests to the page, late."""
        for message in self.held:
            self._to_page.send(message)
        self.held.clear()


def kernel_call(page: Page, path: str, code: str, seconds: float = 90) -> dict[str, Any]:
    """Run `code` in the kernel of `path` (found through the sessions API, as a kernel client of
    the server's runtime dir) while the page is served; the JSON it printed after RESULT."""
    thread, result = in_background(path, code)
    wait_for(page, "the kernel's answer", lambda: not thread.is_alive(), seconds)
    return answer(result)


def in_background(path: str, code: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `code` in the kernel of `path` on a thread: the page must be driven meanwhile (the
    routed socket is served only while Playwright is called), then read `["text"]`."""
    from jupyter_client import BlockingKernelClient

    with urllib.request.urlopen(f"{URL}/api/sessions", timeout=10) as r:
        kernel = next(s["kernel"]["id"] for s in json.loads(r.read()) if s["path"] == path)
    result: dict[str, Any] = {}

    def run() -> None:
        client = BlockingKernelClient(connection_file=str(OUT / "runtime" / f"kernel-{kernel}.json"))
        client.load_connection_file()
        client.start_channels()
        out: list[str] = []
        try:
            client.execute_interactive(code, timeout=90, output_hook=lambda m: out.append(m["content"].get("text", "")))
        finally:
            client.stop_channels()
            result["text"] = "".join(out)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def answer(result: dict[str, Any]) -> dict[str, Any]:
    """What a background kernel call printed after RESULT."""
    assert "RESULT" in result.get("text", ""), result
    return dict(json.loads(result["text"].split("RESULT", 1)[1]))


EDIT = """
import json, time
from flue_nb.notebook.document.frontend import NotReached, connect
doc = connect(timeout=5)
doc.timeout = {timeout}
t = time.monotonic()
try:
    old = await doc.edit_cell("c1", {new!r}, expected={old!r})
    out = {{"written": True, "old": old}}
except NotReached as exc:
    out = {{"written": False, "reach": exc.reach, "message": str(exc)}}
out["seconds"] = round(time.monotonic() - t, 2)
print("RESULT" + json.dumps(out))
"""

INSERT = """
import json, time
from flue_nb.notebook.document.frontend import NotReached, connect
doc = connect(timeout=5)
t = time.monotonic()
try:
    await doc.insert_cell("never = 1")
    out = {"written": True}
except NotReached as exc:
    out = {"written": False, "reach": exc.reach, "message": str(exc)}
out["seconds"] = round(time.monotonic() - t, 2)
print("RESULT" + json.dumps(out))
"""


def edits(page: Page, events: Events, lab: bool) -> None:
    """Every step in JupyterLab (`lab`) or Notebook 7."""
    tag, path = ("lab", "fix.ipynb") if lab else ("nb7", "seven/fix.ipynb")
    where = "JupyterLab" if lab else "Notebook 7"
    open_notebook(page, path, lab=lab)
    step(f"{where} (no collaboration) open, kernel idle")
    run_done(page, 0)
    run_done(page, 3)
    chat = page.locator(VISIBLE + ".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    step("setup and chat cells ran")

    ask(chat, "insert")
    expect(by_source(page, "z = 3")).to_have_count(1, timeout=TIMEOUT)
    assert sources(page)[2] == "z = 3", sources(page)  # below `x = 1` (c1)
    expect(chat.locator(".flue-tool", has_text="insert_cell").last).to_contain_text("in your open tab")
    marked(page, "z = 3", "inserted")
    step("chat: insert_cell: `z = 3` appeared below `x = 1`, labelled 'flue agent'")

    ask(chat, "edit", approve=True)
    expect(by_source(page, "x = 10")).to_have_count(1, timeout=TIMEOUT)
    card = chat.locator(".flue-tool", has_text="edit_cell").last
    expect(card).to_contain_text("of fix.ipynb in your open tab")
    expect(card.locator(".flue-celldiff .flue-del")).to_have_text("-x = 1")
    expect(card.locator(".flue-celldiff .flue-add")).to_have_text("+x = 10")
    marked(page, "x = 10", "edited")
    if card.get_attribute("open") is None:  # opened while it asked for approval, it may stay open
        card.locator("summary").first.click()
    expect(card.locator(".flue-celldiff")).to_be_visible()
    card.screenshot(path=str(OUT / f"frontend-diff-{tag}.png"))
    step(f"chat: edit_cell (approved): `x = 1` became `x = 10`; the card shows the diff (frontend-diff-{tag}.png)")

    ask(chat, "run")
    expect(by_source(page, "x = 10").locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]"), timeout=TIMEOUT)
    marked(page, "x = 10", "ran")
    step("chat: run_cell: the edited cell shows its execution count")

    ask(chat, "move")
    first = page.locator(VISIBLE + ".jp-Notebook .jp-Cell").first.locator(".jp-InputArea-editor")
    expect(first).to_contain_text("y = 2", timeout=TIMEOUT)
    marked(page, "y = 2", "moved")
    step("chat: move_cell: `y = 2` moved to the top")

    ask(chat, "delete")
    expect(by_source(page, "w = 4")).to_have_count(0, timeout=TIMEOUT)
    step("chat: delete_cell: `w = 4` is gone")

    # From a %%flue cell: the agent inserts a cell at the end and runs it, in this tab.
    flue_cell = page.locator(
        VISIBLE + ".jp-Notebook .jp-Cell",
        has=page.locator(".jp-InputArea-editor", has_text=re.compile(r"^\s*%%flue --agent editor")),
    )
    flue_cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Control+Enter")  # run in place: no new cell below
    added = by_source(page, "v = 5\nv * 2")
    expect(added.locator(".jp-OutputArea-output")).to_contain_text("10", timeout=TIMEOUT)
    expect(added.locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]"))
    expect(flue_cell.locator(".flue-static")).to_contain_text("in your open tab", timeout=TIMEOUT)
    marked(page, "v = 5\nv * 2", "ran")
    step("%%flue cell: insert_cell + run_cell: `v = 5; v * 2` appeared at the end and shows 10")
    page.locator(VISIBLE + ".jp-Notebook .jp-Cell").first.scroll_into_view_if_needed()
    page.locator(VISIBLE).screenshot(path=str(OUT / f"frontend-edits-{tag}.png"))
    step(f"screenshot of the top (moved, edited and inserted cells, labelled): frontend-edits-{tag}.png")

    # The user types into `y = 2` while the agent's edit of it waits for approval.
    send(chat, "race")
    card = chat.locator(".flue-tool-awaiting_approval")
    expect(card).to_be_visible(timeout=TIMEOUT)
    editor = by_source(page, "y = 2").locator(".jp-InputArea-editor .cm-content")
    editor.click()
    page.keyboard.press("End")
    page.keyboard.type("  # mine")
    card.locator(".flue-approve").click()
    expect(chat.locator(".flue-answer", has_text="race: done")).to_have_count(1, timeout=TIMEOUT)
    expect(by_source(page, "y = 2  # mine")).to_have_count(1)
    expect(by_source(page, "y = 20")).to_have_count(0)
    expect(chat.locator(".flue-tool", has_text="edit_cell").last).to_contain_text("changed since you read it")
    # The cell is the user's again: the agent's label went when they typed.
    expect(by_source(page, "y = 2  # mine").locator(".flue-agent-label")).to_have_count(0)
    step("the approved edit was refused; the user's typing is intact (and the cell no longer labelled)")
    page.locator(VISIBLE).screenshot(path=str(OUT / f"frontend-refused-{tag}.png"))
    step(f"screenshot: frontend-refused-{tag}.png")
    save(page, path, "y = 2  # mine")
    step("saved")

    # A tab asleep: the edit reaches it only after the kernel gave up, and it refuses it.
    events.hold_op = "edit"
    thread, result = in_background(path, EDIT.format(timeout=OP_TIMEOUT, old="x = 10", new="x = 99"))
    wait_for(page, "the edit request to reach the page's socket", lambda: bool(events.held))
    wait_for(page, "the kernel's answer", lambda: not thread.is_alive(), OP_TIMEOUT + PROBE + 30)
    late = answer(result)
    assert late.get("reach") == "no_answer" and late["written"] is False, late
    assert "did not answer within 5 s" in late["message"] and "will not apply" in late["message"], late
    assert late["seconds"] < OP_TIMEOUT + PROBE + 5, late
    step(f"asleep: the kernel heard 'no_answer' after {late['seconds']} s: {late['message']}")
    events.hold_op = None
    events.release()
    applied = by_source(page, "x = 99")
    wait_for(page, "the page's answer to the late edit", lambda: events.expired > 0 or applied.count() > 0)
    expect(applied).to_have_count(0)  # applied late, after the kernel was told it was not
    expect(by_source(page, "x = 10")).to_have_count(1)
    step("asleep: handed over late, the edit was refused by the page (`x = 10` as it was)")

    # A reload of the page while the edit waits: the notebook is the saved one (the old state).
    events.hold_op = "edit"
    page.once("dialog", lambda dialog: dialog.accept())  # a 'leave the page?' question, if any
    thread, result = in_background(path, EDIT.format(timeout=OP_TIMEOUT, old="x = 10", new="x = 98"))
    wait_for(page, "the edit request to reach the page's socket", lambda: bool(events.held))
    events.held.clear()  # the old page never gets it
    events.hold_op = None
    page.reload()
    expect(page.locator(VISIBLE + ".jp-Notebook .jp-Cell").first).to_be_visible(timeout=TIMEOUT)
    kernel_idle(page, lab)
    wait_for(page, "the kernel's answer", lambda: not thread.is_alive(), OP_TIMEOUT + PROBE + 30)
    cut = answer(result)
    assert cut.get("reach") == "no_answer" and cut["written"] is False, cut
    expect(by_source(page, "x = 10")).to_have_count(1, timeout=TIMEOUT)
    expect(by_source(page, "x = 98")).to_have_count(0)
    assert "y = 2  # mine" in sources(page) and "z = 3" in sources(page), sources(page)
    step(f"reload during an edit: 'no_answer' after {cut['seconds']} s; the page shows the saved notebook")
    # The reloaded page is a new front end: the next edit lands there (the new state).
    done = kernel_call(page, path, EDIT.format(timeout=OP_TIMEOUT, old="x = 10", new="x = 11"))
    assert done["written"] is True and done["old"] == "x = 10", done
    expect(by_source(page, "x = 11")).to_have_count(1, timeout=TIMEOUT)
    marked(page, "x = 11", "edited")
    step(f"after the reload the next edit landed in {done['seconds']} s (`x = 11`)")
    page.locator(VISIBLE + ".jp-Notebook .jp-Cell").first.scroll_into_view_if_needed()
    page.locator(VISIBLE).screenshot(path=str(OUT / f"frontend-reloaded-{tag}.png"))
    step(f"screenshot: frontend-reloaded-{tag}.png")
    save(page, path, "x = 11")

    # The notebook's tab closed, the front end still connected: the kernel hears so at once.
    if lab:
        page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabCloseIcon").click()
        expect(page.locator(".jp-NotebookPanel")).to_have_count(0)
    else:
        page.goto(f"{URL}/tree")
        expect(page.locator(".jp-DirListing")).to_be_visible(timeout=TIMEOUT)
    closed = kernel_call(page, path, INSERT)
    assert closed["written"] is False and closed["reach"] == "not_open", closed
    assert f"no open tab has {path} open" in closed["message"], closed
    assert closed["seconds"] < PROBE + 5, closed  # the probe's bound, not the operation's timeout
    step(f"tab closed: the kernel heard 'not_open' after {closed['seconds']} s: {closed['message']}")


def scenario(page: Page) -> None:
    # Notebook 7 may ask which kernel to start on a loaded machine: take the one the notebook names.
    asks = page.locator(".jp-Dialog").filter(has_text="Select Kernel")
    page.add_locator_handler(asks, lambda dialog: dialog.get_by_role("button", name="Select").click())
    events = Events(page)
    step("--- JupyterLab without collaboration")
    edits(page, events, lab=True)
    step("--- Notebook 7 without collaboration, the same server")
    edits(page, events, lab=False)


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab, then Notebook 7", scenario)], height=1400))
