"""`flue-nb acp --kernel CONNECTION_FILE` / `--notebook PATH`: ACP sessions in a running kernel.

The conversation runs here, in the ACP process, so its text, thinking and tool calls stream to
the client as they happen; everything it touches is the kernel's. The kernel's side
(`flue_nb.notebook.magics.attach`, called through its shell channel with `jupyter_client`)
serves the kernel's tools over MCP (`%flue serve`) and names the conversation its `%flue` cells
continue and its store. The agent mounts those tools under their own names (`python`, `cells`,
`edit_cell`, `read`, `bash`, ...), so its `python` runs in the kernel's namespace and the record
is the one a `%flue` chat draws; and it opens that conversation in that store, so a `%flue chat`
in the kernel follows the ACP turns (the store's follow) and its Approve / Deny and Stop reach
them (the store's ballot and abort). Approval is decided here, `ask` for every tool that changes
something: the client is asked (`session/request_permission`) and the kernel's chat too, and the
first answer wins. A notebook is found through the Jupyter server's sessions API, the server the
way a kernel finds its own (`jpserver-*.json` in the Jupyter runtime dir).
"""

from __future__ import annotations

import ast
import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools.rules import ApprovalRules
from flue_nb.runtime.tools.tool import Tool

__all__ = ["KERNEL_INSTRUCTIONS", "Attachment", "KernelTarget", "kernel_agent"]

KERNEL_INSTRUCTIONS = """\
You are a helpful coding and data assistant working in the user's live Jupyter kernel{notebook}, \
through an editor (an ACP client). The `python` tool runs code in the kernel's own namespace: \
the variables, imports and data the user's cells made are there, and what you define stays for \
them. The notebook tools read and change the notebook's cells; the file and shell tools act in \
the kernel's working directory. Answer concisely; say what you changed."""

ATTACH_TIMEOUT = 60.0
"""Seconds the kernel has to answer (it answers between cells: a long cell delays it)."""

_ATTACH = "__import__('flue_nb.notebook.magics.attach', fromlist=['attach'])"


@dataclass(frozen=True, slots=True)
class Attachment:
    """Where an attached kernel's conversation is and how its tools are reached."""

    conversation: str
    """The conversation the kernel's `%flue` cells continue: the ACP session's id."""
    db: str
    """Its store: an absolute SQLite path or a `postgresql://` URL."""
    cwd: str
    """The kernel's working directory."""
    url: str
    token: str
    attachment: str
    notebook: str
    """The notebook's path as the server gave it to the kernel (`JPY_SESSION_NAME`), or ""."""
    connection_file: str


class KernelTarget:
    """The running kernel ACP sessions attach to: by connection file, or by notebook path."""

    def __init__(
        self, *, connection_file: str | None = None, notebook: str | None = None, timeout: float = ATTACH_TIMEOUT
    ) -> None:
        if (connection_file is None) == (notebook is None):
            raise ConfigError("a kernel is named by exactly one of a connection file and a notebook path")
        self._connection_file = connection_file
        self._notebook = notebook
        self._timeout = timeout
        self._lock = threading.Lock()
        self._client: Any = None
        self._attached: Attachment | None = None

    def __repr__(self) -> str:
        return f"KernelTarget({self._connection_file or self._notebook!r})"

    def connection_file(self) -> str:
        """The kernel's connection file (a notebook's found through its Jupyter server)."""
        if self._connection_file is not None:
            if not os.path.isfile(self._connection_file):
                raise ConfigError(f"{self._connection_file}: no such connection file")
            return os.path.abspath(self._connection_file)
        from flue_nb.notebook.document.servers import Unavailable, notebook_kernel

        assert self._notebook is not None
        try:
            return notebook_kernel(self._notebook, timeout=min(self._timeout, 15.0)).connection_file
        except Unavailable as exc:
            raise ConfigError(str(exc)) from None

    def attach(self) -> Attachment:
        """Attach once (later calls get the same attachment): the kernel serves its tools to us."""
        with self._lock:
            if self._attached is None:
                self._attached = self._attach()
            return self._attached

    def _attach(self) -> Attachment:
        path = self.connection_file()
        client = _client(path, self._timeout)
        try:
            raw = _evaluate(client, f"{_ATTACH}.attach('flue-nb acp')", self._timeout)
            info = json.loads(raw)
        except BaseException:
            client.stop_channels()
            raise
        self._client = client
        return Attachment(
            conversation=info["conversation"],
            db=info["db"],
            cwd=info["cwd"],
            url=info["url"],
            token=info["token"],
            attachment=info["attachment"],
            notebook=info.get("notebook", ""),
            connection_file=path,
        )

    def close(self) -> None:
        """Detach (the kernel stops the server it started for us) and close the channels."""
        with self._lock:
            client, attached = self._client, self._attached
            self._client = self._attached = None
        if client is None or attached is None:
            return
        try:
            _evaluate(client, f"{_ATTACH}.detach({attached.attachment!r})", 10.0)
        except (ConfigError, OSError):
            pass  # a kernel that is gone or busy: its server stops when it does
        finally:
            client.stop_channels()


def _client(connection_file: str, timeout: float) -> Any:
    from jupyter_client.blocking.client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=connection_file)
    try:
        client.load_connection_file()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{connection_file}: not a kernel connection file ({exc})") from None
    client.start_channels()
    try:
        client.wait_for_ready(timeout=timeout)
    except RuntimeError as exc:
        client.stop_channels()
        raise ConfigError(f"the kernel of {connection_file} did not answer within {timeout:g} s ({exc})") from None
    return client


def _evaluate(client: Any, expression: str, timeout: float) -> Any:
    """`expression` evaluated in the kernel, silently (no output, no history, no execution count):
    its value (a Python literal), or `ConfigError` with the kernel's own words."""
    import queue

    try:
        reply = client.execute(
            "", silent=True, store_history=False, user_expressions={"v": expression}, reply=True, timeout=timeout
        )
    except (TimeoutError, queue.Empty):
        raise ConfigError(
            f"the kernel did not answer within {timeout:g} s (it answers between cells: is one running?)"
        ) from None
    found = reply["content"].get("user_expressions", {}).get("v", {})
    if found.get("status") != "ok":
        name, value = found.get("ename", "Error"), found.get("evalue", "")
        if name in ("ModuleNotFoundError", "AttributeError") and "flue_nb" in value:
            raise ConfigError(
                f"the kernel's Python has no flue_nb that can be attached to ({name}: {value}); install this "
                "flue_nb version in the kernel's environment"
            )
        raise ConfigError(f"the kernel refused: {value or name}")
    return ast.literal_eval(found["data"]["text/plain"])


class KernelTools(LocalSandbox):
    """The sandbox of an attached session: no tools of its own (the kernel's come over MCP), the
    approval rules every tool is guarded by, and the kernel's word on its notebook tools."""

    def __init__(self, cwd: str, approver: Callable[..., Any], approval: Any = "ask") -> None:
        super().__init__(cwd, sandbox="none")  # nothing runs here: every tool is the kernel's
        self.rules = ApprovalRules.of(approval)
        self._approver = approver
        self._guarded: dict[int, tuple[Tool, Tool]] = {}

    def tools(self) -> list[Tool]:
        """None of its own: the kernel's tools are mounted from its MCP server."""
        return []

    def guard(self, tools: Sequence[Tool]) -> list[Tool]:
        """Every tool under the approval rules (each wrapped once)."""
        from flue_nb.runtime.tools.approval import with_approval

        out = []
        for t in tools:
            found = self._guarded.get(id(t))
            if found is None or found[0] is not t:
                wrapped = with_approval(t, rules=self.rules, approver=self._approver, fallback="deny", cwd=self.cwd)
                found = self._guarded[id(t)] = (t, wrapped)
            out.append(found[1])
        return out

    def prompt_notes(self) -> str:
        """What the kernel's sandbox says about the notebook tools."""
        from flue_nb.notebook.kernel.notebook_tools import PROMPT_NOTES

        return PROMPT_NOTES


def kernel_agent(model: Any, target: KernelTarget) -> Callable[[str, Callable[..., Any], list[dict[str, Any]]], Any]:
    """The assistant of an attached session: `model` with the kernel's tools (mounted from its MCP
    server under their own names), the client's MCP servers, every tool that changes something
    under `ask`."""
    from flue_nb.runtime.agent import agent
    from flue_nb.runtime.agent.hooks import use_mcp, use_model, use_sandbox

    def make(cwd: str, approver: Callable[..., Any], mcp: list[dict[str, Any]]) -> Any:
        attached = target.attach()
        box = KernelTools(attached.cwd, approver)
        where = f" (notebook {attached.notebook})" if attached.notebook else ""

        @agent(name="acp")
        def assistant() -> str:
            use_model(model)
            use_sandbox(box)
            headers = {"Authorization": f"Bearer {attached.token}"}
            # A long cell's worth of time: the client's cancel, or Stop in the notebook, ends a call.
            use_mcp("kernel", url=attached.url, headers=headers, prefix="", call_timeout=None)
            for server in mcp:
                use_mcp(**server)
            return KERNEL_INSTRUCTIONS.format(notebook=where)

        return assistant

    return make
