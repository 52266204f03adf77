"""The chat's Stop on an outside call whose code holds the kernel's main thread (issue 24.3).

A real kernel serves (`%flue serve`), a real `mcp` client calls `python` with a long
`time.sleep`, and a `%flue chat` shows the conversation. The test plays the chat's JS: it reads
the widget's synced `holding` from iopub and sends `flue_stop_request` on the control channel,
as `chat.js` `stopHeldCall` does through the page's kernel connection.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest
from kernel_helpers import Kernel
from test_serve_kernel import mcp, text
from test_serve_magic_kernel import _url_token

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-stop")
    kernel = Kernel(root / "jupyter", root)
    kernel.ok("%config FlueMagics.db = 'flue.sqlite'")
    url, token = _url_token(kernel.ok("%flue serve -c outside --busy-timeout 2").stdout)
    kernel.ok("%flue chat -c outside")
    yield kernel, url, token
    kernel.shutdown()


def _call_in_thread(url: str, token: str, code: str) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    async def steps(s):
        return await s.call_tool("python", {"code": code})

    def go() -> None:
        try:
            box["result"] = mcp(url, token, steps)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            box["error"] = exc
        box["at"] = time.monotonic()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, box


def _holding(kernel: Kernel, want_set: bool, timeout: float = 30) -> str:
    """The chat's synced `holding` as the browser sees it: the next update that sets (or clears) it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kernel.kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        if msg["msg_type"] != "comm_msg":
            continue
        data = msg["content"].get("data") or {}
        state = data.get("state") or {}
        if data.get("method") == "update" and "holding" in state and bool(state["holding"]) == want_set:
            return str(state["holding"])
    raise AssertionError(f"the chat was not told that a call {'holds' if want_set else 'released'} the thread")


def _stop_request(kernel: Kernel, content: dict[str, Any]) -> dict[str, Any]:
    """Send `flue_stop_request` on the control channel, as the chat's JS does; the reply's content."""
    msg = kernel.kc.session.msg("flue_stop_request", content)
    kernel.kc.control_channel.send(msg)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        reply = kernel.kc.control_channel.get_msg(timeout=10)
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            assert reply["msg_type"] == "flue_stop_reply", reply
            return dict(reply["content"])
    raise AssertionError("no flue_stop_reply")


def test_stop_from_the_chat_ends_a_sleeping_call_at_once_and_the_client_is_told(chat):
    kernel, url, token = chat
    thread, box = _call_in_thread(url, token, "import time\nbefore_sleep = 1\ntime.sleep(30)\nafter_sleep = 1")
    call_id = _holding(kernel, True)
    assert call_id.startswith("mcp_"), call_id
    time.sleep(0.5)  # well inside the sleep
    sent = time.monotonic()
    assert _stop_request(kernel, {"call_id": call_id}) == {"status": "ok", "stopped": True}
    thread.join(10)
    assert not thread.is_alive() and "error" not in box, box
    assert box["at"] - sent < 2.0, f"the client waited {box['at'] - sent:.1f} s after Stop"
    result = box["result"]
    assert result.is_error
    assert "Aborted in the notebook" in text(result) and "The user stopped this call" in text(result), text(result)
    assert _holding(kernel, False) == ""
    started = time.monotonic()
    run = kernel.ok("print(before_sleep, 'after_sleep' in globals())")
    assert run.stdout.split() == ["1", "False"]
    assert time.monotonic() - started < 5  # the main thread is free: the sleep did not go on
    outcome = kernel.ok(
        "from flue_nb.runtime.session import open_conversation\n"
        "subs = open_conversation('outside', db='flue.sqlite').store.submissions('outside')\n"
        "print(subs[-1].state.value, subs[-1].outcome and subs[-1].outcome.value)"
    ).stdout.split()
    assert outcome == ["settled", "aborted"], outcome


def test_a_stop_for_a_call_that_ended_leaves_the_users_cell_alone(chat):
    kernel, url, token = chat
    thread, box = _call_in_thread(url, token, "quick_call = 7")
    call_id = _holding(kernel, True)
    thread.join(30)
    assert not box["result"].is_error, text(box["result"])
    # The Stop was clicked while the call ran, and arrives once a user's cell has started.
    msg_id = kernel.send("import time\ntime.sleep(2)\nprint('cell untouched', quick_call)")
    time.sleep(0.7)
    assert _stop_request(kernel, {"call_id": call_id}) == {"status": "ok", "stopped": False}
    run = kernel.collect(msg_id)
    assert run.status == "ok", run.all_text()
    assert run.stdout.strip() == "cell untouched 7"
    # Idle kernel, any other call id: nothing to stop, nothing aborted.
    assert _stop_request(kernel, {"call_id": "mcp_nope"})["stopped"] is False
    assert kernel.ok("print('still fine')").stdout.strip() == "still fine"


def test_a_malformed_stop_request_is_answered_with_what_it_needs(chat):
    kernel, _, _ = chat
    reply = _stop_request(kernel, {"call": 3})
    assert reply["status"] == "error" and reply["stopped"] is False
    assert "needs `call_id`" in reply["message"]
