"""A real ACP agent from the package index in the flue chat: `fast-agent-mcp` (its `fast-agent-acp`),
run against the loopback OpenAI-compatible server (tests/openai_server.py) in a real kernel with
`%flue chat --agent acp:...`. Its model asks for the kernel's `python` through the `flue-kernel`
MCP server the chat gave it; fast-agent asks permission, the chat card's Approve answers, the
code runs in the kernel's namespace, and the answer streams into the chat.

fast-agent needs Python >= 3.12, so it lives in a venv of its own, `.venv-fast-agent/`, built here
(`tests/venvs.py`) from the package index (`venvs.FAST_AGENT`, pinned) on a 3.12+ interpreter: the one
`FLUE_TEST_PYTHON312` names, else `python3.13`/`python3.12` on PATH, else pyenv's. Without one
(or without the index) the test skips saying why, except under CI (`CI=true`), where it fails.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest
from kernel_helpers import Kernel, chat_helpers

pytest.importorskip("acp")
pytest.importorskip("anywidget", reason="the chat widget needs the `widget` extra")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from venvs import Unavailable, fast_agent_acp  # noqa: E402

from tests.openai_server import OpenAIServer, chat, text, tool_call  # noqa: E402

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(1800)]  # the first run builds .venv-fast-agent from PyPI


@pytest.fixture(scope="module")
def fast_agent() -> Path:
    try:
        return fast_agent_acp()
    except Unavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the fast-agent test must run under CI: {exc}")
        pytest.skip(str(exc))


SETUP = """\
import json, time
import flue_nb as flue
from flue_nb.notebook.views.chat.widget import open_widgets
%config FlueMagics.db = 'flue.sqlite'
""" + chat_helpers(tries=2400)


def test_fast_agent_works_in_the_kernel_from_the_flue_chat(tmp_path, fast_agent):
    server = OpenAIServer().start()
    server.enqueue(
        chat(tool_call("c1", "flue-kernel__python", {"code": "fa = 6 * 7\nprint(fa)"})),
        chat(text("fast-agent computed 42 in your kernel.")),
    )
    home = tmp_path / "fast-agent-home"
    command = [str(fast_agent), "--model", "generic.gpt-test", "--home", str(home)]
    spec = "acp:" + shlex.join(command)
    kernel = Kernel(tmp_path / "jupyter", tmp_path, GENERIC_BASE_URL=server.base_url, GENERIC_API_KEY="loopback")
    try:
        kernel.ok(SETUP + f"%flue chat --agent {json.dumps(spec)}\nw = open_widgets()[-1]")
        card = json.loads(
            kernel.ok(
                "w.send_message('compute six times seven in my kernel')\n"
                "card = wait_for(lambda: [c for c in tool_cards(w.history + w.live) if c.get('ask')], 'asked')[0]\n"
                "print(json.dumps(card))",
                timeout=180,
            ).stdout
        )
        kernel.ok(f"assert w.answer({card['call_id']!r}, True)")
        # Polled by short cells: fast-agent's call runs on the kernel's main thread between cells.
        deadline = time.monotonic() + 180
        while True:
            done = "[b for b in w.history if b['kind'] == 'submission' and b['outcome']]"
            blocks = json.loads(kernel.ok(f"print(json.dumps({done}))").stdout)
            if blocks or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        [block] = blocks
        namespace = kernel.ok("print(fa)").stdout.strip()
    finally:
        kernel.shutdown()
        server.stop()
    assert card["name"] == "acp_other" and "flue-kernel" in card["ask"], card
    assert block["outcome"] == "completed", block
    [done] = [p for p in block["parts"] if p["kind"] == "tool"]
    assert done["status"] == "ok" and done["approval"]["approved"] is True, done
    assert [p["text"] for p in block["parts"] if p["kind"] == "text"][-1] == "fast-agent computed 42 in your kernel."
    assert namespace == "42"  # fast-agent's call ran in the kernel, through `%flue serve`
    # The model saw the kernel's tools as fast-agent names MCP tools, and the call's result.
    [first, second] = server.chat_requests
    assert "flue-kernel__python" in [t["function"]["name"] for t in first.body["tools"]]
    [result] = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert "42" in json.dumps(result["content"])
