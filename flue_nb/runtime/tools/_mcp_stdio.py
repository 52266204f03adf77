"""The stdio transport of an MCP server: its process, and its stdout read in linear time with a
limit on one message.

The SDK's `stdio_client` joins each 64 KB read onto the whole pending line and splits it again,
so one message of n bytes costs O(n²): a 50 MB tool result took minutes before pydantic even saw
it. Here a line's pieces are collected in a list and joined once; a line past `MAX_MESSAGE` is
not kept at all, and the request it answered gets a JSON-RPC error saying so (its id is read
from the message's first or last bytes, where servers put it). The process handling follows the
SDK's (and the spec's): close stdin, wait, then end the process group, every wait bounded.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc

__all__ = ["MAX_MESSAGE", "TOO_LARGE", "UNREADABLE", "LineReader", "exited", "stdio_transport"]

log = logging.getLogger("flue_nb")

MAX_MESSAGE = 32 * 1024 * 1024
"""Bytes of one JSON-RPC message read from a stdio server (32 MiB). A larger answer is refused
with an error result: tool results are cut to 50 KB for the model anyway, and reading one is
linear here (about 0.05 s a MB) but still held in memory whole while it is parsed."""
TOO_LARGE = -32099
"""The JSON-RPC error code of the answer flue_nb makes for a request whose answer was too large."""
UNREADABLE = -32098
"""... and for one whose answer could not be parsed (nested too deep, say): the call gets an error
result at once instead of waiting out its `call_timeout`."""

_EDGE = 512
_ID_HEAD = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_ID_TAIL = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$')
_GRACE = 2.0
"""Seconds a server gets to exit once its stdin closes, and again after SIGTERM."""


class LineReader:
    """Splits a byte stream into lines, each joined once; lines past `limit` are summarised."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_MESSAGE if limit is None else limit
        self._parts: list[bytes] = []
        self._size = 0
        self._head = b""
        self._tail = b""
        self._over = False

    def feed(self, chunk: bytes) -> list[bytes | tuple[bytes, bytes, int]]:
        """The lines `chunk` completes: bytes, or `(head, tail, size)` for one over the limit."""
        out: list[bytes | tuple[bytes, bytes, int]] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._add(chunk[start:end])
            out.append(self._finish())
            start = end + 1
        if start < len(chunk):
            self._add(chunk[start:])
        return out

    def _add(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._over:
            self._tail = (self._tail + piece)[-_EDGE:]
            return
        self._parts.append(piece)
        if self._size > self.limit:
            joined = b"".join(self._parts)
            self._head, self._tail, self._parts, self._over = joined[:_EDGE], joined[-_EDGE:], [], True

    def _finish(self) -> bytes | tuple[bytes, bytes, int]:
        line: bytes | tuple[bytes, bytes, int]
        line = (self._head, self._tail, self._size) if self._over else b"".join(self._parts)
        self._parts, self._size, self._head, self._tail, self._over = [], 0, b"", b"", False
        return line


def oversized_id(head: bytes, tail: bytes) -> Any:
    """The request id an oversized message answers, from its first or last bytes (None: unknown)."""
    import json

    for pattern, edge in ((_ID_HEAD, head), (_ID_TAIL, tail)):
        if (found := pattern.search(edge)) is not None:
            return json.loads(found.group(1))
    return None


def _message(line: bytes | tuple[bytes, bytes, int], server: str) -> Any:
    """One line as a `SessionMessage`, a parse error (as the SDK passes them on), or None."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    if isinstance(line, tuple):
        head, tail, size = line
        ident = oversized_id(head, tail)
        why = (
            f"the MCP server's answer is {size / 1e6:.1f} MB, over the {MAX_MESSAGE / (1024 * 1024):g} MiB "
            "flue_nb reads from one message; it was dropped unread. Ask the tool for less (a page, a "
            "filter, a smaller range)."
        )
        if ident is None:
            log.warning("flue_nb: MCP server `%s`: a message of %d bytes with no id was dropped unread", server, size)
            return None
        error = types.JSONRPCError(jsonrpc="2.0", id=ident, error=types.ErrorData(code=TOO_LARGE, message=why))
        return SessionMessage(error)
    if not line.strip():
        return None
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        ident = oversized_id(line[:_EDGE], line[-_EDGE:]) if b'"method"' not in line[:_EDGE] else None
        if ident is not None and (b'"result"' in line or b'"error"' in line):
            lines = str(exc).splitlines() or [type(exc).__name__]
            detail = next((x for x in lines if "Invalid JSON" in x), lines[0]).split(" [type=")[0].strip()
            why = f"the MCP server's answer could not be read ({detail[:300]}); ask the tool for something simpler."
            return SessionMessage(
                types.JSONRPCError(jsonrpc="2.0", id=ident, error=types.ErrorData(code=UNREADABLE, message=why))
            )
        # What the session passes to its message handler for a line that is not JSON-RPC: the
        # line itself (cut), which `Connection` logs once per server.
        return ValueError(line[:300].decode("utf-8", "replace"))


@contextlib.asynccontextmanager
async def stdio_transport(
    command: list[str],
    env: dict[str, str] | None,
    cwd: str | None,
    errlog: Any,
    server: str,
    started: Callable[[int], None] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """The server's process and the (read, write) streams a `ClientSession` takes; `started`
    gets the process id once it runs."""
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    process = await anyio.open_process(
        command,
        env=get_default_environment() | (env or {}),
        cwd=cwd,
        stderr=errlog,
        start_new_session=sys.platform != "win32",  # its own group, so its children end with it
    )
    if started is not None:
        started(process.pid)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        assert process.stdout is not None
        lines = LineReader()
        async with read_send:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in process.stdout:
                    for line in lines.feed(chunk):
                        message = _message(line, server)
                        if message is not None:
                            await read_send.send(message)

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with write_recv:
                async for message in write_recv:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_send.aclose()  # the session sees the connection end, not a hang

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_recv, write_send
        finally:
            with anyio.CancelScope(shield=True):
                await write_send.aclose()
                await _stop(process)
                await read_recv.aclose()
            tg.cancel_scope.cancel()


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin, give the server `_GRACE` s to exit, then SIGTERM and SIGKILL its group."""
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        assert process.stdin is not None
        await process.stdin.aclose()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if await _exited(process, _GRACE):
            break
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            if sys.platform == "win32":  # pragma: no cover - no process groups
                process.kill()
            else:
                os.killpg(process.pid, sig)
    if not await _exited(process, _GRACE):
        log.warning("flue_nb: MCP server process %d is still alive after SIGKILL; leaving it", process.pid)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        assert process.stdout is not None
        await process.stdout.aclose()


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    # returncode, not wait(): a child that inherited the pipes makes an exited server look hung.
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None


def exited(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie not yet reaped included), as Linux's /proc shows.

    The reader notices a server's end only when its stdout's EOF is read, which can come after
    the next call was sent (a server killed between prompts then fails that call as "went away
    during it"). Elsewhere than Linux this says False and the streams decide.
    """
    if not os.path.isdir("/proc/self"):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.rsplit(b")", 1)[-1].split()[:1] in ([b"Z"], [b"X"])
