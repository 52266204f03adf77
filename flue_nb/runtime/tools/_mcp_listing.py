"""Which of an MCP server's listed tools mount, and under which names: `mcp__<server>__<tool>`
sanitised for providers, `tools=` applied."""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

from flue_nb.runtime.errors import McpConnectionError

if TYPE_CHECKING:
    from flue_nb.runtime.tools.mcp import McpServer, McpTool

__all__ = ["NAME_LIMIT", "needs_task", "select", "tool_name"]

NAME_LIMIT = 64
"""Longest tool name every provider accepts."""


def tool_name(server: str, remote: str, prefix: str | None = None) -> str:
    """`mcp__<server>__<tool>` (or `<prefix><tool>`), with characters providers refuse replaced
    and long names shortened."""
    head = f"mcp__{server}__" if prefix is None else prefix
    name = f"{head}{re.sub(r'[^A-Za-z0-9_-]', '_', remote)}"
    if len(name) > NAME_LIMIT:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: NAME_LIMIT - 9]}_{digest}"
    return name


def needs_task(listed: Any) -> bool:
    """Whether a listed tool requires task-augmented execution (`execution.taskSupport`)."""
    # Such a tool refuses a plain call: it is called through the task flow (_mcp_tasks).
    execution = getattr(listed, "execution", None)
    return getattr(execution, "task_support", None) == "required"


def select(server: McpServer, tools: list[McpTool]) -> list[McpTool]:
    """The tools `tools=` names, in its order (all when it is None); a clear error for a name the
    server does not list."""
    if server.tools is None:
        return tools
    by_remote = {t.remote_name: t for t in tools}
    missing = [n for n in server.tools if n not in by_remote]
    if missing:
        listed = ", ".join(f"`{t.remote_name}`" for t in tools) or "none"
        raise McpConnectionError(
            f"MCP server `{server.name}` has no tool "
            + ", ".join(f"`{n}`" for n in missing)
            + f" (it lists: {listed}); fix `tools=` in use_mcp()",
            server=server.name,
        )
    return [by_remote[n] for n in server.tools]
