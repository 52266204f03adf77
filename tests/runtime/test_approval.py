"""The approval policy wrapper: allow, deny, ask (with and without someone to ask)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from pydantic import BaseModel

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.tools.approval import ApprovalRequest, request_summary, with_approval
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput, define_tool, execute_tool


class _Cmd(BaseModel):
    command: str


def _bash_like(calls: list[str]) -> Tool:
    async def run(args: _Cmd) -> str:
        calls.append(args.command)
        return f"ran {args.command}"

    return define_tool("bash", "Run a command.", input=_Cmd, run=run)


class _Approver:
    """Answers every request with `answer` and remembers what it was asked."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.requests: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> bool:
        self.requests.append(request)
        return self.answer


def _call(tool: Tool, raw: object) -> ToolOutput:
    return asyncio.run(execute_tool(tool, raw, ToolContext(call_id="c1")))


def test_allow_runs_the_tool_unchanged() -> None:
    calls: list[str] = []
    inner = _bash_like(calls)
    wrapped = with_approval(inner, policy="allow")
    assert wrapped is inner
    out = _call(wrapped, {"command": "ls"})
    assert not out.is_error and out.content == "ran ls" and calls == ["ls"]


def test_deny_refuses_and_says_how_the_user_can_change_it() -> None:
    calls: list[str] = []
    out = _call(with_approval(_bash_like(calls), policy="deny"), {"command": "rm -rf /"})
    assert out.is_error
    assert calls == []
    assert "policy denies" in out.content and "`bash`" in out.content
    assert "`approval`" in out.content
    assert out.details is not None and out.details["approval"]["approved"] is False


def test_ask_with_approver_yes_runs_the_tool_and_the_request_describes_the_call() -> None:
    calls: list[str] = []
    approver = _Approver(True)
    out = _call(with_approval(_bash_like(calls), policy="ask", approver=approver), {"command": "make test"})
    assert not out.is_error and out.content == "ran make test" and calls == ["make test"]
    [request] = approver.requests
    assert request == ApprovalRequest("bash", "c1", {"command": "make test"}, "bash: make test")
    assert out.details is not None and out.details["approval"] == {
        "policy": "ask",
        "approved": True,
        "reason": "approved",
    }


def test_ask_with_approver_no_refuses_without_running() -> None:
    calls: list[str] = []
    out = _call(with_approval(_bash_like(calls), policy="ask", approver=_Approver(False)), {"command": "ls"})
    assert out.is_error and calls == []
    assert "declined" in out.content


def test_ask_headless_falls_back_to_deny_and_says_so() -> None:
    calls: list[str] = []
    out = _call(with_approval(_bash_like(calls), policy="ask"), {"command": "ls"})
    assert out.is_error and calls == []
    assert "no one to ask in a headless run" in out.content
    assert "fallback policy is deny" in out.content


def test_ask_headless_with_allow_fallback_runs_and_says_so() -> None:
    calls: list[str] = []
    out = _call(with_approval(_bash_like(calls), policy="ask", fallback="allow"), {"command": "ls"})
    assert not out.is_error and calls == ["ls"]
    assert out.content.startswith("ran ls")
    assert "fallback policy is allow" in out.content


def test_invalid_input_is_an_error_result_without_asking() -> None:
    approver = _Approver(True)
    out = _call(with_approval(_bash_like([]), policy="ask", approver=approver), {"cmd": "ls"})
    assert out.is_error and "command" in out.content
    assert approver.requests == []


def test_what_the_inner_tool_raises_still_becomes_an_error_result() -> None:
    def boom(args: _Cmd) -> str:
        raise RuntimeError("disk full")

    inner = define_tool("bash", "Run a command.", input=_Cmd, run=boom)
    out = _call(with_approval(inner, policy="ask", approver=_Approver(True)), {"command": "ls"})
    assert out.is_error and "disk full" in out.content


def test_wrapper_keeps_name_description_and_schema() -> None:
    inner = _bash_like([])
    wrapped = with_approval(inner, policy="deny")
    assert wrapped.spec() == inner.spec()


def test_unknown_policy_or_fallback_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="'allow', 'ask' or 'deny'"):
        with_approval(_bash_like([]), policy="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="fallback"):
        with_approval(_bash_like([]), policy="ask", fallback="ask")  # type: ignore[arg-type]


def test_summary_shows_code_first_line_and_how_many_more() -> None:
    assert request_summary("python", {"code": "import os\nos.listdir()\n"}) == "python: import os (+1 more lines)"
    # The argument the tool names as its summary (or its first text argument), as cards show it;
    # a call without a text argument is its arguments as JSON.
    assert request_summary("write", {"path": "a.txt", "content": "x"}) == "write: a.txt"
    assert request_summary("count", {"n": 3}) == 'count: {"n": 3}'


def test_importing_approval_does_not_load_ipython() -> None:
    code = "import sys, flue_nb.runtime.tools.approval; print('IPython' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
