"""A call of an MCP tool that requires task-augmented execution (`execution.taskSupport: "required"`).

The call is created as a task (`tools/call` carrying `task`), polled with `tasks/get` at the pace
the server asks (`pollInterval`; each status message reaches observers as progress), and its
result fetched with `tasks/result`, all within the call's timeout. A call that runs out of time
or is aborted is cancelled on the server (`tasks/cancel`).

The SDK (mcp 2.3) has the task types of the 2025-11-25 revision but no flow, and its
`ClientSession.send_request` checks a `tools/call` answer against `CallToolResult`, which a
`CreateTaskResult` is not. So the creating request goes through the session's
`JSONRPCDispatcher` (public; the connection builds it and hands it to the session), and
`tasks/get`, `tasks/result` and `tasks/cancel` through `send_request` with the SDK's own request
types (methods outside its surface are not checked against it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["call_as_task"]

DEFAULT_POLL = 1.0
"""Seconds between polls when the server suggests none."""
MIN_POLL, MAX_POLL = 0.05, 10.0
"""The bounds a server's `pollInterval` is held to (a zero would spin, an hour would stall)."""
_WAITING = ("working", "input_required")


async def call_as_task(
    session: Any,
    dispatcher: Any,
    tool: str,
    arguments: dict[str, Any],
    *,
    timeout: float | None,
    progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
) -> Any:
    """Run `tool` as a task and return its `CallToolResult` (an error result if the task failed
    or was cancelled). Raises the SDK's `MCPError` with `REQUEST_TIMEOUT` past `timeout`."""
    import mcp.types as types
    from mcp.shared.exceptions import MCPError
    from mcp.types.jsonrpc import REQUEST_TIMEOUT

    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout

    def left() -> float | None:
        if deadline is None:
            return None
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise MCPError(REQUEST_TIMEOUT, f"the task did not finish within {timeout:g} s")
        return remaining

    params = types.CallToolRequestParams(name=tool, arguments=arguments, task=types.TaskMetadata())
    wire = params.model_dump(by_alias=True, mode="json", exclude_none=True)
    options: dict[str, Any] = {} if deadline is None else {"timeout": left()}
    raw = await dispatcher.send_raw_request("tools/call", wire, options)
    if "task" not in raw:  # a server that ran it at once after all
        return types.CallToolResult.model_validate(raw, by_name=False)
    task: Any = types.CreateTaskResult.model_validate(raw, by_name=False).task
    task_id = task.task_id
    try:
        polls = 0
        while task.status in _WAITING:
            if progress is not None and task.status_message:
                await progress(float(polls), None, task.status_message)
            pause = (task.poll_interval / 1000) if task.poll_interval else DEFAULT_POLL
            pause = min(max(pause, MIN_POLL), MAX_POLL)
            remaining = left()
            await asyncio.sleep(pause if remaining is None else min(pause, remaining))
            polls += 1
            task = await session.send_request(
                types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
                types.GetTaskResult,
                request_read_timeout_seconds=left(),
            )
        if task.status == "cancelled":
            why = f": {task.status_message}" if task.status_message else ""
            return types.CallToolResult(content=[types.TextContent(text=f"The task was cancelled{why}")], is_error=True)
        result = await session.send_request(
            types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
            types.CallToolResult,
            request_read_timeout_seconds=left(),
        )
        if task.status == "failed" and not result.is_error:
            result = result.model_copy(update={"is_error": True})
        return result
    except BaseException:
        # Timed out or aborted: the server need not go on working for nobody.
        with contextlib.suppress(Exception):
            await asyncio.shield(_cancel(session, task_id))
        raise


async def _cancel(session: Any, task_id: str) -> None:
    import mcp.types as types

    await session.send_request(
        types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)),
        types.CancelTaskResult,
        request_read_timeout_seconds=5.0,
    )
