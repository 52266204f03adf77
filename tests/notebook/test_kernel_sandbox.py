"""The kernel sandbox: the six tools plus `python`, approval applied, the namespace found lazily."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import IPython
import pytest

from flue_nb.notebook.kernel.sandbox import KernelSandbox, kernel
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools.approval import ApprovalRequest
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput, execute_tool


@pytest.fixture
def no_ipython(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)


def _tool(sandbox: KernelSandbox, name: str) -> Tool:
    [found] = [t for t in sandbox.tools() if t.name == name]
    return found


def _call(sandbox: KernelSandbox, name: str, raw: dict[str, Any]) -> ToolOutput:
    ctx = ToolContext(call_id="c1", sandbox=sandbox)
    return asyncio.run(execute_tool(_tool(sandbox, name), raw, ctx))


class _Approver:
    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def __call__(self, request: ApprovalRequest) -> bool:
        self.asked.append(request.summary)
        return self.answer


def test_tool_list_is_the_six_then_python_then_the_notebook_tools(tmp_path: Path) -> None:
    sandbox = kernel(tmp_path, namespace={})
    assert [t.name for t in sandbox.tools()] == [
        "read",
        "write",
        "edit",
        "bash",
        "grep",
        "glob",
        "python",
        "cells",
        "cell",
        "variables",
        "insert_cell",
        "edit_cell",
        "delete_cell",
        "move_cell",
        "run_cell",
    ]


def test_kernel_is_a_local_sandbox_in_the_current_directory_by_default(no_ipython: None) -> None:
    sandbox = kernel()
    assert isinstance(sandbox, LocalSandbox)
    assert sandbox.cwd == os.getcwd()


def test_python_runs_in_the_given_namespace(tmp_path: Path) -> None:
    ns: dict[str, Any] = {"df": [1, 2]}
    out = _call(kernel(tmp_path, namespace=ns), "python", {"code": "df.append(3)\nlen(df)"})
    assert "Out: 3" in out.content and "changed `df`" in out.content
    assert ns["df"] == [1, 2, 3]


def test_file_tools_act_on_the_kernel_cwd(tmp_path: Path) -> None:
    out = _call(kernel(tmp_path, namespace={}), "write", {"path": "a.txt", "content": "hi"})
    assert not out.is_error
    assert (tmp_path / "a.txt").read_text() == "hi"


def test_no_ipython_and_no_namespace_is_a_clear_config_error(tmp_path: Path, no_ipython: None) -> None:
    sandbox = kernel(tmp_path)  # building it is fine: the namespace is looked up at first use
    with pytest.raises(ConfigError, match="no running IPython"):
        _ = sandbox.namespace
    with pytest.raises(ConfigError, match="namespace="):
        _call(sandbox, "python", {"code": "1"})


def test_namespace_defaults_to_ipython_user_ns_looked_up_at_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_ipython: None
) -> None:
    sandbox = kernel(tmp_path)
    tools = sandbox.tools()
    user_ns: dict[str, Any] = {"answer": 42}
    monkeypatch.setattr(IPython, "get_ipython", lambda: SimpleNamespace(user_ns=user_ns))
    [python] = [t for t in tools if t.name == "python"]
    out = asyncio.run(execute_tool(python, {"code": "answer + 1"}, ToolContext(call_id="c1")))
    assert "Out: 43" in out.content
    assert sandbox.namespace is user_ns


def test_approval_deny_applies_to_every_tool_that_changes_something(tmp_path: Path) -> None:
    ns: dict[str, Any] = {}
    (tmp_path / "seen.txt").write_text("hello\n")
    sandbox = kernel(tmp_path, namespace=ns, approval="deny")
    py = _call(sandbox, "python", {"code": "x = 1"})
    sh = _call(sandbox, "bash", {"command": "touch made.txt"})
    assert py.is_error and "policy denies" in py.content and "x" not in ns
    assert sh.is_error and "policy denies" in sh.content and not (tmp_path / "made.txt").exists()
    wrote = _call(sandbox, "write", {"path": "ok.txt", "content": "fine"})
    assert wrote.is_error and "policy denies" in wrote.content and not (tmp_path / "ok.txt").exists()
    edited = _call(sandbox, "edit", {"path": "seen.txt", "old_string": "hello", "new_string": "bye"})
    assert edited.is_error and (tmp_path / "seen.txt").read_text() == "hello\n"
    # Read-only tools run under deny: they change nothing.
    assert not _call(sandbox, "read", {"path": "seen.txt"}).is_error
    assert not _call(sandbox, "glob", {"pattern": "*.txt"}).is_error


def test_approval_ask_puts_python_to_the_approver(tmp_path: Path) -> None:
    approver = _Approver(True)
    sandbox = kernel(tmp_path, namespace={}, approval="ask", approver=approver)
    out = _call(sandbox, "python", {"code": "6 * 7"})
    assert "Out: 42" in out.content and approver.asked == ["python: 6 * 7"]


def test_approval_ask_headless_falls_back_to_deny_and_says_so(tmp_path: Path) -> None:
    out = _call(kernel(tmp_path, namespace={}, approval="ask"), "python", {"code": "1"})
    assert out.is_error and "headless" in out.content and "fallback policy is deny" in out.content


def test_approval_per_tool_mapping(tmp_path: Path) -> None:
    approver = _Approver(False)
    sandbox = kernel(tmp_path, namespace={}, approval={"python": "ask", "write": "deny"}, approver=approver)
    assert _call(sandbox, "python", {"code": "1"}).is_error and approver.asked == ["python: 1"]
    assert _call(sandbox, "write", {"path": "a.txt", "content": ""}).is_error
    assert not _call(sandbox, "bash", {"command": "true"}).is_error


def test_bad_approval_settings_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'allow', 'ask' or 'deny'"):
        kernel(tmp_path, namespace={}, approval="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="fallback"):
        kernel(tmp_path, namespace={}, fallback="ask")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown tools"):
        kernel(tmp_path, namespace={}, approval={"pyhton": "deny"}).tools()


def test_a_chats_always_allow_keeps_the_offered_grant_with_the_conversation() -> None:
    import asyncio

    from flue_nb.notebook.kernel import approve
    from flue_nb.runtime.tools.approval import ApprovalRequest
    from flue_nb.runtime.tools.grants import Grant

    granted: list[tuple[str, str]] = []

    class _Session:
        def allow(self, tool: str, pattern: str) -> None:
            granted.append((tool, pattern))

    class _Chat:
        interactive = True

        def shows(self, call_id: str) -> bool:
            return call_id == "k1"

        async def ask(self, call_id: str, question: str) -> bool:
            # What the widget does on {"type": "approve", "approved": true, "always": true}.
            approve.always_allow(call_id, _Session())
            return True

        def answer(self, call_id: str, approved: bool) -> None:
            pass

    chat = _Chat()
    approve.asked_in_views(lambda: [chat])
    try:
        request = ApprovalRequest(
            "bash", "k1", {"command": "make test"}, "bash: make test", grant=Grant("bash", "make test")
        )
        assert asyncio.run(approve.notebook_approver(request)) is True
    finally:
        approve._views.remove(approve._views[-1])
    assert granted == [("bash", "make test")]
    assert approve.always_allow("k1", _Session()) is None  # offered only while it is asked
