"""The kernel sandbox: the host sandbox in the kernel's working directory, plus the `python` tool
and the notebook tools.

`kernel()` is what `use_sandbox(flue.kernel())` attaches. Its tool list replaces the six (contract
1.3) with the six composed from the standard factories followed by `python`, which runs code in
the kernel's own namespace, and the notebook tools (`cells`, `cell`, `variables`, `insert_cell`,
`edit_cell`, `run_cell`: `kernel.notebook_tools`), which its `prompt_notes` describe in the system
prompt. The `approval` setting wraps chosen tools (by default the ones that run code or change
the notebook; with rules, any tool) with `with_approval`: `guard` wraps the agent's own tools and
its MCP tools too, so one set of rules covers every tool that changes something. Its commands (`bash`, and the `rg`/`find` behind `grep` and
`glob`) run contained by default (`sandbox="auto"`: bubblewrap, or refused where it is missing; see
`flue_nb.runtime.sandbox.contain`); `python` runs in the kernel itself and is not contained.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, get_args

from flue_nb.notebook.kernel.python_cells import PythonToolMode
from flue_nb.notebook.kernel.python_tool import HANDLE_NAME, OnChange, Runner, keep_in, python_tool
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.sandbox.contain import SandboxLevel
from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import standard_tools
from flue_nb.runtime.tools.approval import ApprovalPolicy, Approver, Fallback, with_approval
from flue_nb.runtime.tools.rules import ApprovalRules
from flue_nb.runtime.tools.tool import Tool

__all__ = ["KernelSandbox", "kernel"]

T = TypeVar("T")

Approval = ApprovalPolicy | Mapping[str, Any] | ApprovalRules | str
"""A mode for every tool that changes something, a dict of rules, rules, or a rules file's path."""


class KernelSandbox(LocalSandbox):
    """The host sandbox plus `python` on the kernel's namespace, with approval applied."""

    def __init__(
        self,
        cwd: str | os.PathLike[str],
        *,
        namespace: dict[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        approval: Approval = "allow",
        approver: Approver | None = None,
        fallback: Fallback = "deny",
        runner: Runner | None = None,
        approval_timeout: float | None = None,
        sandbox: SandboxLevel = "auto",
        allow_hosts: Sequence[str] | None = None,
        hide_paths: Sequence[str] | None = None,
        python_tool: PythonToolMode = "hidden",
    ) -> None:
        """Args:
        cwd: The working directory for the file and shell tools.
        namespace: Where `python` runs code; None means IPython's `user_ns`, looked up at first use.
        env: Variables the author opts into for the shell, on top of the allow-list.
        approval: A mode for every tool that changes something (read-only tools always run),
            or rules: `{"default": MODE, TOOL: MODE | [[PATTERN, MODE], ...]}`, or a file of
            them (see `flue_nb.runtime.tools.rules`); capped by the hub policy's `approval.max`.
        approver: Who answers `ask`; None means a headless run, which follows `fallback`.
        fallback: What `ask` does with no one to ask.
        runner: Where `python` code runs; default: the thread waiting on the run (see below).
        approval_timeout: Seconds an `ask` waits for a chat's answer before `fallback` applies
            (None or 0: no limit).
        sandbox: `"auto"`/`"bwrap"`: commands run under bubblewrap (refused where it is
            missing); `"none"`: they run as the user.
        allow_hosts: Hosts contained commands may reach, through the filtering proxy.
        hide_paths: Places hidden from contained commands besides the standard secret places.
        python_tool: `"cells"`: a `python` call that changes the namespace is also written into
            the notebook as a provenance-marked cell (where the document can be written live).
        """
        if python_tool not in get_args(PythonToolMode):
            raise ConfigError(f"python_tool must be 'hidden' or 'cells', got {python_tool!r}")
        self.python_tool: PythonToolMode = python_tool
        from flue_nb.runtime.policy import current_policy

        policy = current_policy()
        if policy is not None:
            sandbox = policy.sandbox_level(sandbox)  # type: ignore[assignment]
        super().__init__(cwd, env=env, sandbox=sandbox, allow_hosts=allow_hosts, hide_paths=hide_paths)
        self._namespace = namespace
        self.rules = _rules(approval)
        """The approval rules in force (the hub policy's ceiling applied)."""
        self._guarded: dict[int, tuple[Tool, Tool]] = {}
        if fallback not in get_args(Fallback):
            raise ConfigError(f"approval fallback must be 'allow' or 'deny', got {fallback!r}")
        self._approver = approver
        self._fallback: Fallback = fallback
        self._runner = runner
        if approval_timeout is not None and (not isinstance(approval_timeout, (int, float)) or approval_timeout < 0):
            raise ConfigError(f"approval_timeout must be a number of seconds >= 0, got {approval_timeout!r}")
        self._approval_timeout = approval_timeout

    def __repr__(self) -> str:
        return f"KernelSandbox({self.cwd!r})"

    @property
    def namespace(self) -> dict[str, Any]:
        """The namespace `python` runs in; IPython's `user_ns` unless one was given."""
        if self._namespace is None:
            self._namespace = _ipython_user_ns()
        return self._namespace

    def keep_result(self, text: str) -> str | None:
        """Keep a cut tool result's whole text in the namespace (`_flue.results[N]`); say where."""
        try:
            number = keep_in(self.namespace, text)
        except ConfigError:  # no IPython to take the namespace from: nowhere to keep it
            return None
        return f"`{HANDLE_NAME}.results[{number}]` (str)"

    def prompt_notes(self) -> str:
        """The system prompt's word on the notebook tools and the untrusted-data envelope."""
        from flue_nb.notebook.kernel.notebook_tools import PROMPT_NOTES

        return PROMPT_NOTES

    def _on_change(self) -> OnChange | None:
        if self.python_tool != "cells":
            return None
        from flue_nb.notebook.kernel.python_cells import cell_writer

        return cell_writer(lambda: self.namespace)

    def tools(self) -> list[Tool]:
        """The six standard tools, `python`, then the notebook tools, each wrapped by its approval policy."""
        from flue_nb.notebook.kernel.notebook_tools import notebook_tools

        # A function, not the dict: the namespace is resolved when code first runs, not here.
        runner = self._runner or _on_waiting_thread
        tools = [
            *standard_tools(self),
            python_tool(lambda: self.namespace, runner=runner, on_change=self._on_change(), workspace=self.cwd),
            *notebook_tools(lambda: self.namespace, runner=runner, workspace=self.cwd),
        ]
        names = sorted(t.name for t in tools)
        # A name close to one of ours is a typo; any other may be the agent's own or an MCP tool.
        unknown = sorted(n for n in self.rules.tools if n not in names and difflib.get_close_matches(n, names, 1, 0.8))
        if unknown:
            raise ConfigError(f"approval names unknown tools {unknown}; the kernel sandbox has {names}")
        return [self._wrap(t) for t in tools]

    def guard(self, tools: Sequence[Tool]) -> list[Tool]:
        """The agent's own tools and its MCP tools under the same approval rules (each wrapped once)."""
        out = []
        for t in tools:
            found = self._guarded.get(id(t))
            if found is None or found[0] is not t:
                found = self._guarded[id(t)] = (t, self._wrap(t))
            out.append(found[1])
        return out

    def _wrap(self, tool: Tool) -> Tool:
        # In a Jupyter kernel, `ask` asks the chat widget or the cell's stdin (kernel.approve).
        from flue_nb.notebook.kernel.approve import default_approver

        approver = self._approver if self._approver is not None else default_approver(self._approval_timeout)
        return with_approval(tool, rules=self.rules, approver=approver, fallback=self._fallback, cwd=self.cwd)


def kernel(
    cwd: str | os.PathLike[str] | None = None,
    *,
    namespace: dict[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    approval: Approval = "allow",
    approver: Approver | None = None,
    fallback: Fallback = "deny",
    runner: Runner | None = None,
    approval_timeout: float | None = None,
    sandbox: SandboxLevel = "auto",
    allow_hosts: Sequence[str] | None = None,
    hide_paths: Sequence[str] | None = None,
    python_tool: PythonToolMode = "hidden",
) -> KernelSandbox:
    """The live kernel's workspace: `cwd` (default: the current directory) and its namespace.

    See `KernelSandbox` for the arguments. Without `namespace`, the running IPython's `user_ns`
    is used, looked up when `python` first runs; outside IPython that is a `ConfigError`.
    """
    return KernelSandbox(
        os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd()),
        namespace=namespace,
        env=env,
        approval=approval,
        approver=approver,
        fallback=fallback,
        runner=runner,
        approval_timeout=approval_timeout,
        sandbox=sandbox,
        allow_hosts=allow_hosts,
        hide_paths=hide_paths,
        python_tool=python_tool,
    )


def _rules(approval: Approval) -> ApprovalRules:
    """The rules `approval` names, under the hub policy's ceiling (said once when it clamps)."""
    from flue_nb.runtime.policy import current_policy

    rules = ApprovalRules.of(approval)
    policy = current_policy()
    return policy.cap(rules) if policy is not None else rules


async def _on_waiting_thread(fn: Callable[[], T]) -> T:
    """Run user code on the thread blocked waiting for the run (the kernel's main thread, in a
    blocking `%flue` cell), so matplotlib, signals and thread-bound objects behave as in a cell;
    with nobody waiting (a background run) it runs on the runtime's user-code thread, never
    on its event loop; an abort interrupts it."""
    from flue_nb.runtime.coordinator import coordinator

    return await coordinator().run_on_waiter(fn)


def _ipython_user_ns() -> dict[str, Any]:
    # Imported here so the sandbox can be built (and tested) without IPython running.
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise ConfigError(
            "kernel(): no running IPython to take the namespace from; run inside Jupyter/IPython, "
            "or pass one explicitly, e.g. `kernel(namespace=globals())`"
        )
    user_ns: dict[str, Any] = shell.user_ns
    return user_ns
