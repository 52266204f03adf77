"""The kernel sandbox: the host sandbox in the kernel's working directory, plus the `python` tool
and the notebook tools.

`kernel()` is what `use_sandbox(flue.kernel())` attaches. Its tool list replaces the six (contract
1.3) with the six composed from the standard factories followed by `python`, which runs code in
the kernel's own namespace, and the notebook tools (`cells`, `cell`, `variables`, `insert_cell`,
`edit_cell`, `run_cell`: `notebook.cells`), which its `prompt_notes` describe in the system
prompt. The `approval` setting wraps chosen tools (by default the ones that run code or change
the notebook) with `with_approval`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, get_args

from flue_nb.notebook.kernel.python_tool import HANDLE_NAME, Runner, keep_in, python_tool
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import standard_tools
from flue_nb.runtime.tools.approval import ApprovalPolicy, Approver, Fallback, with_approval
from flue_nb.runtime.tools.tool import Tool

__all__ = ["KernelSandbox", "kernel"]

T = TypeVar("T")

APPROVAL_TOOLS = ("python", "bash", "insert_cell", "edit_cell", "run_cell")
"""The tools a single `approval` policy applies to: the ones that run code or change the notebook."""

Approval = ApprovalPolicy | Mapping[str, ApprovalPolicy]


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
    ) -> None:
        """Args:
        cwd: The working directory for the file and shell tools.
        namespace: Where `python` runs code; None means IPython's `user_ns`, looked up at first use.
        env: Variables the author opts into for the shell, on top of the allow-list.
        approval: One policy for `python` and `bash`, or a policy per tool name.
        approver: Who answers `ask`; None means a headless run, which follows `fallback`.
        fallback: What `ask` does with no one to ask.
        runner: Where `python` code runs; default: the thread waiting on the run (see below).
        approval_timeout: Seconds an `ask` waits for a chat's answer before `fallback` applies
            (None or 0: no limit).
        """
        super().__init__(cwd, env=env)
        self._namespace = namespace
        self._policies = _policies(approval)
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
        from flue_nb.notebook.cells import PROMPT_NOTES

        return PROMPT_NOTES

    def tools(self) -> list[Tool]:
        """The six standard tools, `python`, then the notebook tools, each wrapped by its approval policy."""
        from flue_nb.notebook.cells import notebook_tools

        # A function, not the dict: the namespace is resolved when code first runs, not here.
        runner = self._runner or _on_waiting_thread
        tools = [
            *standard_tools(self),
            python_tool(lambda: self.namespace, runner=runner),
            *notebook_tools(lambda: self.namespace, runner=runner),
        ]
        names = {t.name for t in tools}
        unknown = sorted(set(self._policies) - names)
        if unknown:
            raise ConfigError(f"approval names unknown tools {unknown}; the kernel sandbox has {sorted(names)}")
        # In a Jupyter kernel, `ask` asks the chat widget or the cell's stdin (notebook.chat).
        from flue_nb.notebook.chat._approve import default_approver

        approver = self._approver if self._approver is not None else default_approver(self._approval_timeout)
        return [
            with_approval(
                t,
                policy=self._policies.get(t.name, "allow"),
                approver=approver,
                fallback=self._fallback,
            )
            for t in tools
        ]


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
    )


def _policies(approval: Approval) -> dict[str, ApprovalPolicy]:
    """Spread one policy over `APPROVAL_TOOLS`, or check a per-tool mapping."""
    policies = dict.fromkeys(APPROVAL_TOOLS, approval) if isinstance(approval, str) else dict(approval)
    for name, policy in policies.items():
        if policy not in get_args(ApprovalPolicy):
            raise ConfigError(f"approval for `{name}` must be 'allow', 'ask' or 'deny', got {policy!r}")
    return policies


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
