"""Delegation (contract 14): the `task` tool runs a subagent with a fresh context."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from flue_nb.runtime.agent import SubagentDef
from flue_nb.runtime.errors import DelegationDepthExceededError
from flue_nb.runtime.tools.framework import TaskInput
from flue_nb.runtime.messages import UserMessage
from flue_nb.runtime.tools.tool import ToolContext
from flue_nb.runtime.core.transcript import Transcript

if TYPE_CHECKING:
    from flue_nb.runtime.core.loop import AgentRun

__all__ = ["ScopedSandbox", "run_task"]


class ScopedSandbox:
    """The parent's sandbox seen from a subdirectory (a task's `cwd`): relative paths resolve there."""

    def __init__(self, inner: Any, cwd: str) -> None:
        self._inner = inner
        self._cwd = cwd

    @property
    def cwd(self) -> str:
        return self._cwd

    def _abs(self, path: str) -> str:
        return os.path.join(self._cwd, path)

    async def exec(self, command: Any, *, cwd: str | None = None, **kw: Any) -> Any:
        return await self._inner.exec(command, cwd=self._abs(cwd) if cwd else self._cwd, **kw)

    async def read_file(self, path: str) -> bytes:
        return await self._inner.read_file(self._abs(path))

    def read_chunks(self, path: str, chunk_size: int = 65536) -> Any:
        return self._inner.read_chunks(self._abs(path), chunk_size)

    async def write_file(self, path: str, data: bytes) -> None:
        await self._inner.write_file(self._abs(path), data)

    async def stat(self, path: str) -> Any:
        return await self._inner.stat(self._abs(path))

    async def list_dir(self, path: str) -> Any:
        return await self._inner.list_dir(self._abs(path))

    async def realpath(self, path: str) -> str:
        return await self._inner.realpath(self._abs(path))

    def tools(self) -> Any:
        # A sandbox's own tool list is bound to the sandbox itself; scoped runs use the six.
        return None


async def run_task(parent: AgentRun, args: TaskInput, ctx: ToolContext) -> str:
    """Run the named subagent one level deeper and return its final text (14.1, 14.2)."""
    from flue_nb.runtime.core.loop import MAX_DEPTH, AgentRun

    assert parent.rendered is not None
    depth = parent.depth + 1
    if depth > MAX_DEPTH:
        raise DelegationDepthExceededError(
            f"delegation_depth_exceeded: a task chain may be at most {MAX_DEPTH} deep; do this "
            "part yourself instead of delegating it"
        )
    sub: SubagentDef = next(s for s in parent.rendered.subagents if s.name == args.agent)
    sandbox = parent.sandbox
    if sandbox is not None and args.cwd:
        sandbox = ScopedSandbox(sandbox, os.path.normpath(os.path.join(sandbox.cwd, args.cwd)))
    task_id = f"{ctx.call_id}"
    parent_emit = parent.emit

    def emit(type: str, **data: Any) -> Any:
        data.setdefault("task_id", task_id)
        return parent_emit(type, **data)

    parent_emit("task_start", task_id=task_id, agent=sub.name, description=args.description, depth=depth)
    child = AgentRun(
        sub.agent,
        transcript=Transcript(),
        emit=emit,
        settings=parent.settings,
        depth=depth,
        parent_sandbox=sandbox,
        model_override=sub.model if sub.model is not None else parent.model,
        tools_cache=parent._sandbox_tools if sandbox is parent.sandbox else None,
    )
    child.transcript.add(UserMessage(args.prompt))
    try:
        answer = await child.run()
    except BaseException as exc:
        parent_emit("task", task_id=task_id, agent=sub.name, is_error=True, error=str(exc))
        raise
    parent_emit("task", task_id=task_id, agent=sub.name, is_error=False, text=answer.text)
    return answer.text or "(the subagent finished without a text answer)"
