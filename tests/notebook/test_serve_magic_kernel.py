"""`%flue serve` in a real kernel: the printed configuration, status and stop, approvals answered
in a `%flue chat` on the served conversation, an abort and the kernel's interrupt mid-call."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import httpx2
import pytest
from kernel_helpers import Kernel
from test_serve_kernel import mcp, text

from flue_nb.runtime.session import open_conversation

pytestmark = pytest.mark.kernel

SETUP = """\
import json, time
from flue_nb.notebook.views.chat.widget import open_widgets
%config FlueMagics.db = 'flue.sqlite'
def pending(w):
    for _ in range(200):
        for b in w.history + w.live:
            for p in b["parts"]:
                if p.get("status") == "awaiting_approval":
                    return p["call_id"]
        time.sleep(0.05)
    raise AssertionError("no call awaits approval")
"""


@pytest.fixture(scope="module")
def magic(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-magic")
    kernel = Kernel(root / "jupyter", root)
    kernel.ok(SETUP)
    run = kernel.ok("%flue serve --approval ask -c watched --busy-timeout 2")
    yield kernel, run.stdout, root
    kernel.shutdown()


def _url_token(out: str) -> tuple[str, str]:
    url = re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", out)
    token = re.search(r"token \(shown once\): (\S+)", out)
    assert url and token, out
    return url[1], token[1]


def test_serve_prints_the_url_token_and_client_configuration(magic):
    _, out, _ = magic
    url, token = _url_token(out)
    assert f'claude mcp add --transport http flue-kernel {url} --header "Authorization: Bearer {token}"' in out
    block = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert block["mcpServers"]["flue-kernel"] == {
        "type": "http",
        "url": url,
        "headers": {"Authorization": f"Bearer {token}"},
    }
    assert "approval: ask" in out and "conversation `watched`" in out


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            box["error"] = exc

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, box


def _call(url: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    async def steps(s):
        return await s.call_tool(tool, arguments)

    return mcp(url, token, steps)


def test_an_approval_answered_in_the_chat_runs_the_call_and_a_denial_refuses_it(magic):
    kernel, out, _ = magic
    url, token = _url_token(out)
    kernel.ok("%flue chat -c watched")
    kernel.ok("w = open_widgets()[-1]")
    thread, box = _in_thread(lambda: _call(url, token, "python", {"code": "approved_var = 'yes'"}))
    kernel.ok("assert w.answer(pending(w), True)")
    thread.join(30)
    assert not box["result"].is_error, text(box["result"])
    assert kernel.ok("print(approved_var)").stdout.strip() == "yes"

    thread, box = _in_thread(lambda: _call(url, token, "python", {"code": "denied_var = 1"}))
    kernel.ok("assert w.answer(pending(w), False)")
    thread.join(30)
    assert box["result"].is_error
    assert "the user declined this `python` call" in text(box["result"]), text(box["result"])
    assert kernel.ok("print('denied_var' in globals())").stdout.strip() == "False"
    # A read-only tool is not asked about.
    result = _call(url, token, "glob", {"pattern": "*.sqlite"})
    assert not result.is_error and "flue.sqlite" in text(result), text(result)


def _sleeping_call(kernel: Kernel, url: str, token: str) -> tuple[threading.Thread, dict[str, Any]]:
    """A call approved in the chat whose code now sleeps 60 s on the kernel's main thread."""
    thread, box = _in_thread(lambda: _call(url, token, "python", {"code": "import time\ntime.sleep(60)"}))
    kernel.ok("assert w.answer(pending(w), True)")
    time.sleep(1.0)
    return thread, box


def test_an_abort_stops_the_running_call_and_the_client_is_told(magic):
    kernel, out, root = magic
    thread, box = _sleeping_call(kernel, *_url_token(out))
    started = time.monotonic()
    # An abort recorded elsewhere (`flue-nb`, another process, the chat's Stop) reaches the owner.
    open_conversation("watched", db=str(root / "flue.sqlite")).abort()
    thread.join(30)
    assert time.monotonic() - started < 10
    assert box["result"].is_error
    assert "Aborted in the notebook" in text(box["result"]), text(box["result"])
    assert kernel.ok("print('after the abort')").stdout.strip() == "after the abort"
    # The abort broke the 60 s sleep itself (SIGINT to the main thread), not only the client's wait.
    assert time.monotonic() - started < 10


def test_interrupting_the_kernel_interrupts_the_running_call(magic):
    kernel, out, _ = magic
    thread, box = _sleeping_call(kernel, *_url_token(out))
    kernel.interrupt()
    thread.join(30)
    assert box["result"].is_error
    assert "interrupted" in text(box["result"]), text(box["result"])
    assert kernel.ok("print('still a kernel')").stdout.strip() == "still a kernel"


def test_status_then_stop_then_serve_again_on_the_same_port(magic):
    kernel, out, _ = magic
    url, _ = _url_token(out)
    status = kernel.ok("%flue serve status").stdout
    assert url in status and "recorded in `watched`" in status and "approval ask" in status, status
    assert "flue: stopped serving" in kernel.ok("%flue serve stop").stdout
    assert "no MCP server is running" in kernel.ok("%flue serve status").stdout
    again = kernel.ok("%flue serve --tools python,read")
    new_url, new_token = _url_token(again.stdout)
    assert new_url == url  # the port it had, being free again
    assert "tools: read, python" in again.stdout

    async def steps(s):
        return [t.name for t in (await s.list_tools()).tools]

    assert sorted(mcp(new_url, new_token, steps)) == ["python", "read"]
    bad = kernel.run("%flue serve --tools python,nope")
    assert "already serving" in bad.stdout
    kernel.ok("%flue serve stop")
    bad = kernel.run("%flue serve --tools python,nope")
    assert "unknown tools ['nope']" in bad.all_text()


def test_a_restart_ends_the_server_and_serve_takes_the_same_port_again(tmp_path):
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        url, token = _url_token(kernel.ok("%flue serve").stdout)
        kernel.restart()
        with pytest.raises(httpx2.ConnectError):
            httpx2.post(url, headers={"Authorization": f"Bearer {token}"}, content=b"{}", trust_env=False)
        again, new_token = _url_token(kernel.ok("%flue serve").stdout)
        assert again == url and new_token != token
        result = _call(again, new_token, "python", {"code": "21 * 2"})
        assert "Out: 42" in text(result), text(result)
        assert _post_status(url, token) == 401  # the old token is no longer good
    finally:
        kernel.shutdown()


def _post_status(url: str, token: str) -> int:
    response = httpx2.post(url, headers={"Authorization": f"Bearer {token}"}, content=b"{}", trust_env=False)
    return response.status_code
