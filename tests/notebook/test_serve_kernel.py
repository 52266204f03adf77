"""`%flue serve` / `flue.serve()` in a real kernel, driven by the official `mcp` client over HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import httpx2
import pytest
from kernel_helpers import Kernel

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    kernel = Kernel(root / "jupyter", root)
    run = kernel.run(
        "import flue_nb as flue\n"
        "served = flue.serve(db='flue.sqlite', busy_timeout=1.5)\n"
        "print(served.url); print(served.token)"
    )
    assert run.status == "ok", run.all_text()
    url, token = run.stdout.split()[:2]
    yield kernel, url, token, root
    kernel.shutdown()


async def _session_call(url: str, token: str, steps: Any, client: str = "claude-code") -> Any:
    import mcp.types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    info = types.Implementation(name=client, version="1.0")
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, client_info=info) as session,
    ):
        await session.initialize()
        return await steps(session)


def mcp(url: str, token: str, steps: Any, client: str = "claude-code") -> Any:
    """Run `await steps(session)` with a real MCP client session on the served kernel."""
    return asyncio.run(_session_call(url, token, steps, client))


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def test_lists_the_kernel_tools_with_our_schemas(served):
    kernel, url, token, _ = served

    async def steps(s):
        return (await s.list_tools()).tools

    tools = {t.name: t for t in mcp(url, token, steps)}
    for name in ("python", "read", "write", "edit", "bash", "grep", "glob", "cells", "cell", "variables"):
        assert name in tools, sorted(tools)
    assert tools["python"].input_schema["properties"]["code"]["type"] == "string"
    assert "live Jupyter kernel" in (tools["python"].description or "")
    assert tools["read"].input_schema["required"] == ["path"]


def test_tools_carry_mcp_behaviour_hints_for_outside_allow_rules(served):
    kernel, url, token, _ = served

    async def steps(s):
        return (await s.list_tools()).tools

    hints = {
        t.name: t.annotations.model_dump(by_alias=True, exclude_none=True)
        for t in mcp(url, token, steps)
        if t.annotations
    }
    for reader in ("read", "grep", "glob", "cells", "cell", "variables"):
        assert hints[reader]["readOnlyHint"] is True and hints[reader]["openWorldHint"] is False, reader
    for runner in ("bash", "python"):
        assert hints[runner] == {
            "readOnlyHint": False,
            "destructiveHint": True,
            "idempotentHint": False,
            "openWorldHint": True,
        }
    assert hints["write"]["readOnlyHint"] is False and hints["write"]["idempotentHint"] is True
    assert hints["edit"]["destructiveHint"] is True and hints["insert_cell"]["destructiveHint"] is False


def test_python_runs_on_the_main_thread_and_the_next_cell_reads_it(served):
    kernel, url, token, _ = served

    async def steps(s):
        return await s.call_tool(
            "python", {"code": "import threading\nmade_by_mcp = 41 + 1\nthreading.current_thread().name"}
        )

    result = mcp(url, token, steps)
    assert not result.is_error, text(result)
    assert "'MainThread'" in text(result)
    assert "created `made_by_mcp` (int)" in text(result)
    run = kernel.run("print(made_by_mcp * 2)")
    assert run.stdout.strip() == "84"


def test_every_call_is_recorded_in_the_clients_conversation(served):
    kernel, url, token, _ = served

    async def steps(s):
        return await s.call_tool("python", {"code": "recorded_marker = 'r1'"})

    mcp(url, token, steps, client="recorder-test")
    run = kernel.run("%flue history -c mcp:recorder-test --db flue.sqlite")
    shown = run.all_text()
    assert "MCP call from `recorder-test`: python" in shown, shown
    assert "recorded_marker = 'r1'" in shown


def test_a_secret_in_a_result_is_redacted(served):
    kernel, url, token, _ = served
    kernel.ok("import os\nos.environ['SERVE_TEST_API_KEY'] = 'sk-serve-test-0123456789abcdef'")

    async def steps(s):
        return await s.call_tool("bash", {"command": "echo $SERVE_TEST_API_KEY; echo done"})

    result = mcp(url, token, steps)
    assert "sk-serve-test-0123456789abcdef" not in text(result)

    async def py(s):
        return await s.call_tool("python", {"code": "print(os.environ['SERVE_TEST_API_KEY'])"})

    result = mcp(url, token, py)
    assert "sk-serve-test-0123456789abcdef" not in text(result), text(result)


def _post(url: str, headers: dict[str, str]) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "python", "arguments": {"code": "1"}}}
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    with httpx2.Client(trust_env=False) as client:
        return client.post(url, content=json.dumps(body), headers={**base, **headers}, timeout=10)


def test_a_missing_or_wrong_token_gets_a_bare_401(served):
    _, url, token, _ = served
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": token}):
        response = _post(url, headers)
        assert response.status_code == 401
        assert response.content == b""


def test_a_foreign_origin_is_refused_even_with_the_token(served):
    _, url, token, _ = served
    response = _post(url, {"Authorization": f"Bearer {token}", "Origin": "http://evil.example"})
    assert response.status_code == 403
    # A rebinding page keeps its own name in Origin, whatever address it resolved to.
    response = _post(url, {"Authorization": f"Bearer {token}", "Origin": "http://127.0.0.1.evil.example:80"})
    assert response.status_code == 403


def test_a_call_while_a_cell_runs_waits_then_says_busy(served):
    kernel, url, token, _ = served
    msg_id = kernel.send("import time\ntime.sleep(4)\nprint('cell done')")
    time.sleep(0.5)

    async def steps(s):
        started = time.monotonic()
        result = await s.call_tool("python", {"code": "ran_while_busy = True"})
        return result, time.monotonic() - started

    result, waited = mcp(url, token, steps)
    assert result.is_error
    assert "kernel is busy" in text(result)
    assert 1.0 <= waited < 4.0
    run = kernel.collect(msg_id)
    assert "cell done" in run.stdout
    assert kernel.run("print('ran_while_busy' in globals())").stdout.strip() == "False"


def test_a_token_is_never_printed_in_status(served):
    kernel, url, token, _ = served
    run = kernel.run("print(repr(served)); print(served.status())")
    assert url in run.stdout
    assert token not in run.stdout
    assert re.search(r"calls=\d+", run.stdout)


def test_the_notebook_tools_see_the_kernels_variables(served):
    kernel, url, token, _ = served
    kernel.ok("seen_by_variables = [1, 2, 3]")

    async def steps(s):
        return await s.call_tool("variables", {})

    result = mcp(url, token, steps)
    assert not result.is_error, text(result)
    assert "seen_by_variables" in text(result)
