"""Another ACP agent in the flue chat, in JupyterLab: its calls into the kernel pass flue_nb's
approval on their cards, asked or not. Run by test_acp_host_browser (in `.venv-browser`).

The notebook's chat hosts the scripted agent (tests/acp_scripted_agent.py), which never asks
permission for its calls into the kernel:
- "use the kernel": its reported `python` call waits on its card; Approve clicked, the call runs
  in the kernel and the agent says what it printed;
- "sneak into the kernel": a call it reported to no one; no card asks, the call is refused, and
  the agent's answer says why.

    drive_acp_host.py URL OUT CHROMIUM
"""

from __future__ import annotations

import sys

from _page import OUT, TIMEOUT, cell, drive, open_notebook, run_done, send, step
from playwright.sync_api import Page, expect


def hosted(page: Page) -> None:
    open_notebook(page, "host.ipynb")
    for i in range(2):
        run_done(page, i)
    chat = cell(page, 1).locator(".flue-chat")
    expect(chat.locator(".flue-state")).to_have_text("idle", timeout=TIMEOUT)
    step("the chat hosts the scripted ACP agent")

    send(chat, "use the kernel")
    card = chat.locator(".flue-tool-awaiting_approval")
    expect(card).to_contain_text("python: hosted = 6 * 7", timeout=TIMEOUT)
    chat.screenshot(path=str(OUT / "host-asked.png"))
    step("its call into the kernel waits on its card, though the agent asked nothing (host-asked.png)")
    card.locator(".flue-approve").click()
    expect(chat.locator(".flue-outcome").last).to_have_text("✓ completed", timeout=TIMEOUT)
    expect(chat.locator(".flue-answer").last).to_contain_text("The kernel says: 42")
    expect(chat.locator(".flue-tool-ok", has_text="hosted = 6 * 7")).to_contain_text("approved by the user")
    chat.screenshot(path=str(OUT / "host-approved.png"))
    step("Approve: the call ran in the kernel, the card says who approved it (host-approved.png)")

    send(chat, "sneak into the kernel")
    expect(chat.locator(".flue-outcome")).to_have_count(2, timeout=TIMEOUT)
    answer = chat.locator(".flue-answer").last
    expect(answer).to_contain_text("reported no tool call with these arguments")
    expect(answer).to_contain_text("did not run")
    expect(chat.locator(".flue-tool-awaiting_approval")).to_have_count(0)
    chat.screenshot(path=str(OUT / "host-unreported.png"))
    step("a call reported to no one: refused, and the agent's answer says why (host-unreported.png)")


if __name__ == "__main__":
    sys.exit(drive([("JupyterLab", hosted)]))
