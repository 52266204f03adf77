"""`LiveDocument`: the notebook open in a Jupyter server with real-time collaboration, edited live.

Every call runs on one event loop thread of this module's own (the room's websocket lives there),
so the tools can await it from the runtime's loop and `connect()` can block from anywhere without
stalling either. Each call is bounded: a lost or silent connection is reopened once, then the call
raises `DocumentError` saying what happened and whether the edit may still land.

The agent shows as a collaborator named "flue agent": in the notebook's room (the awareness the
document's views share) and, joined beside it, in the server's presence room, whose awareness
JupyterLab's collaborators panel lists with the document each one has open.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import urllib.error
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, Literal, TypeVar

from jupyter_ydoc import YNotebook
from pycrdt import Array, Map, Text

from flue_nb.notebook.document._room import Room, RoomLost, presence_url, room_url
from flue_nb.notebook.document.protocol import CellChanged, DocumentError, NotebookCell
from flue_nb.notebook.document.servers import Found, Unavailable, request

__all__ = ["LiveDocument"]

T = TypeVar("T")
log = logging.getLogger(__name__)

STEP_TIMEOUT = 5.0
"""How long one network step of an open document may take, whatever `connect()` was given."""

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _live_loop() -> asyncio.AbstractEventLoop:
    """The live documents' event loop, on a daemon thread started at first use."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="flue-live-doc", daemon=True).start()
            _loop = loop
        return _loop


def _submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    return asyncio.run_coroutine_threadsafe(coro, _live_loop())


async def open_room(found: Found, *, timeout: float) -> Room:
    """Ask the server for the notebook's collaboration session and join its room (on the live loop)."""
    path = urllib.parse.quote(found.path)
    loop = asyncio.get_running_loop()
    try:
        session = await loop.run_in_executor(
            None,
            lambda: request(
                found.server,
                "PUT",
                f"api/collaboration/session/{path}",
                body={"format": "json", "type": "notebook"},
                timeout=timeout,
            ),
        )
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise Unavailable(
                f"{found.server.url} has no real-time collaboration for {found.path!r} (HTTP 404: "
                "jupyter-collaboration is not installed there, or the notebook is not saved under that path)"
            ) from exc
        raise RoomLost(f"the server answered HTTP {exc.code} to the collaboration session request") from exc
    except (OSError, ValueError) as exc:
        raise RoomLost(f"the collaboration session request failed ({type(exc).__name__}: {exc})") from exc
    try:
        url = room_url(found.server, str(session["fileId"]), str(session["sessionId"]))
    except (KeyError, TypeError) as exc:
        raise RoomLost(f"the collaboration session answer lacked {exc} ({session!r:.200})") from exc
    return await Room.open(url, found.server.token, timeout=timeout)


def _cell(ycell: Map[Any]) -> NotebookCell:
    raw = ycell.to_py() or {}
    kind = raw.get("cell_type")
    count = raw.get("execution_count")
    outputs = raw.get("outputs") or ()
    return NotebookCell(
        id=str(raw.get("id", "")),
        kind=kind if kind in ("code", "markdown", "raw") else "raw",
        source=str(raw.get("source", "")),
        # Yjs numbers arrive as floats.
        execution_count=int(count) if isinstance(count, (int, float)) else None,
        outputs=tuple(_plain(o) for o in outputs if isinstance(o, dict)),
        metadata=raw.get("metadata") or {},
    )


def _plain(output: dict[str, Any]) -> dict[str, Any]:
    out = dict(output)
    if isinstance(out.get("execution_count"), float):
        out["execution_count"] = int(out["execution_count"])
    return out


def _nbformat(ycell: Map[Any]) -> dict[str, Any]:
    """A shared cell as an nbformat cell dict (what `create_ycell` takes back)."""
    raw = dict(ycell.to_py() or {})
    raw.pop("execution_state", None)  # the shared model's, not nbformat's
    count = raw.get("execution_count")
    if isinstance(count, float):
        raw["execution_count"] = int(count)
    if isinstance(raw.get("outputs"), list):
        raw["outputs"] = [_plain(o) for o in raw["outputs"] if isinstance(o, dict)]
    return raw


def _youtput(output: Mapping[str, Any]) -> Map[Any]:
    """An nbformat output as the shared model holds it: a map, a stream's text as shared text."""
    out = {k: v for k, v in output.items() if k != "transient"}  # kernel-protocol only, not nbformat
    if out.get("output_type") == "stream":
        text = out.get("text", "")
        out["text"] = Text(text if isinstance(text, str) else "".join(text))
    return Map(out)


def replace_text(text: Text, old: str, new: str) -> None:
    """Turn `text` (holding `old`) into `new` by replacing only the part that differs.

    Someone typing in the same cell keeps their cursor and their words outside that part, and the
    change merges with theirs instead of replacing the whole cell.
    """
    start, shortest = 0, min(len(old), len(new))
    while start < shortest and old[start] == new[start]:
        start += 1
    end = 0
    while end < shortest - start and old[len(old) - 1 - end] == new[len(new) - 1 - end]:
        end += 1
    # pycrdt's text offsets count UTF-8 bytes, not characters.
    begin, stop = len(old[:start].encode()), len(old[: len(old) - end].encode())
    if stop > begin:
        del text[begin:stop]
    middle = new[start : len(new) - end]
    if middle:
        text.insert(begin, middle)


def _index(nb: YNotebook, cell_id: str) -> int:
    for i, ycell in enumerate(nb.ycells):
        if ycell.get("id") == cell_id:
            return int(i)
    raise DocumentError(f"the notebook has no cell with id {cell_id!r}; call `cells` to see the current ids")


def _merge_metadata(ycell: Map[Any], metadata: Mapping[str, Any] | None) -> None:
    if not metadata:
        return
    ymeta = ycell.get("metadata")
    if not isinstance(ymeta, Map):
        ycell["metadata"] = Map({k: v for k, v in metadata.items() if v is not None})
        return
    for key, value in metadata.items():
        if key in ymeta:
            del ymeta[key]  # a nested value is replaced whole
        if value is not None:
            ymeta[key] = value


class LiveDocument:
    """The `Document` of a notebook open in a collaborative Jupyter server (edits show at once)."""

    live = True

    def __init__(self, found: Found, room: Room, *, timeout: float = STEP_TIMEOUT) -> None:
        self.path: str | None = found.path
        self.timeout = timeout
        """Seconds one network step (the server's answer to an edit, a reconnection) may take."""
        self._found = found
        self._room: Room | None = room
        self._reopening: asyncio.Lock | None = None  # made on the live loop, where it is used
        self._closed = False
        self._presence: Room | None = None
        # Not awaited: the collaborators panel is a courtesy, never a reason to fail or delay an edit.
        _submit(self._join_presence())

    def __repr__(self) -> str:
        return f"LiveDocument({self.path!r} on {self._found.server.url})"

    @classmethod
    def open(cls, found: Found, *, timeout: float) -> LiveDocument:
        """Join the notebook's room from any thread, within `timeout` seconds (raises `Unavailable`/`RoomLost`)."""
        future = _submit(open_room(found, timeout=timeout))
        try:
            room = future.result(timeout)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise RoomLost(f"joining the collaboration room took longer than {timeout:g} s") from exc
        return cls(found, room)

    async def _join_presence(self) -> None:
        """Show the agent in the collaborators panel, on this document (best effort, bounded)."""
        state = {"current": f"notebook:{self.path}", "documents": [self.path]}
        try:
            room = await Room.open(
                presence_url(self._found.server), self._found.server.token, timeout=self.timeout, state=state
            )
        except Exception as exc:  # noqa: BLE001 - a server without the room, or a refusal: no panel entry
            log.debug("flue_nb: not shown in the collaborators panel: %s", exc)
            return
        if self._closed:
            await room.close()
        else:
            self._presence = room

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    # -- the Document protocol ------------------------------------------------------------------

    async def cells(self) -> list[NotebookCell]:
        """The cells in document order, as every open view shows them now."""

        async def read(room: Room) -> list[NotebookCell]:
            return [_cell(c) for c in room.notebook.ycells]

        return await self._call(read, "read the cells")

    async def insert_cell(
        self,
        source: str,
        *,
        kind: Literal["code", "markdown"] = "code",
        after: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Insert a cell after `after` (None: at the end); returns its id once the server has it."""
        if kind not in ("code", "markdown"):
            raise DocumentError(f"kind must be 'code' or 'markdown', not {kind!r}")
        import nbformat  # only to make a cell: its schema checks cost ~1 s to import

        make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        cell = dict(make(source, metadata=dict(metadata or {})))
        new_id = str(cell["id"])

        def edit(nb: YNotebook) -> None:
            if any(c.get("id") == new_id for c in nb.ycells):
                return  # a retry after a lost answer: the first attempt landed
            at = len(nb.ycells) if after is None else _index(nb, after) + 1
            nb.ycells.insert(at, nb.create_ycell(cell))

        await self._change(what="insert the cell", edits=(edit,))
        return new_id

    async def edit_cell(
        self, cell_id: str, source: str, *, metadata: Mapping[str, Any] | None = None, expected: str | None = None
    ) -> str:
        """Replace a cell's source (and merge `metadata`); returns the old source. With `expected`
        the check and the change are one transaction of the shared document: a user's typing that
        reached the room before it refuses the edit (`CellChanged`), later typing merges."""
        old: list[str] = []

        def edit(nb: YNotebook) -> None:
            ycell = nb.ycells[_index(nb, cell_id)]
            text = ycell["source"]
            if not old:  # a retry keeps the source the first attempt saw
                if expected is not None and str(text) != expected:
                    raise CellChanged(cell_id, str(text))
                old.append(str(text))
            if str(text) != source:
                if isinstance(text, Text):
                    replace_text(text, str(text), source)
                else:
                    ycell["source"] = Text(source)
            _merge_metadata(ycell, metadata)

        await self._change(what="edit the cell", edits=(edit,))
        return old[0]

    async def delete_cell(self, cell_id: str, *, expected: str) -> tuple[int, dict[str, Any]]:
        """Delete a cell that still holds `expected`; its index and nbformat JSON. The check and
        the deletion are one transaction of the shared document, as for `edit_cell`: typing that
        reached the room first refuses it (`CellChanged`)."""
        gone: list[tuple[int, dict[str, Any]]] = []

        def edit(nb: YNotebook) -> None:
            if gone and all(c.get("id") != cell_id for c in nb.ycells):
                return  # a retry after a lost answer: the first attempt landed
            at = _index(nb, cell_id)
            ycell = nb.ycells[at]
            if str(ycell["source"]) != expected:
                raise CellChanged(cell_id, str(ycell["source"]))
            if not gone:
                gone.append((at, _nbformat(ycell)))
            del nb.ycells[at]

        await self._change(what="delete the cell", edits=(edit,))
        return gone[0]

    async def move_cell(self, cell_id: str, *, after: str | None) -> tuple[int, int]:
        """Move a cell below `after` (None: to the top); its old and new index.

        As JupyterLab's own move does, the cell is deleted and a copy (same id, source, outputs,
        metadata) inserted, in one transaction: the copy holds the source the room has, so typing
        that reached the server first moves with it."""
        where: list[tuple[int, int]] = []

        def edit(nb: YNotebook) -> None:
            if after == cell_id:
                raise DocumentError(f"cannot move cell {cell_id!r} below itself")
            at = _index(nb, cell_id)
            to = 0 if after is None else _index(nb, after) + 1
            if to > at:
                to -= 1  # its own place is freed first
            if not where:
                where.append((at, to))
            if to == at:
                return  # already there (or a retry whose first attempt landed)
            cell = _nbformat(nb.ycells[at])
            del nb.ycells[at]
            nb.ycells.insert(to, nb.create_ycell(cell))

        await self._change(what="move the cell", edits=(edit,))
        return where[0]

    async def write_outputs(
        self, cell_id: str, outputs: Sequence[Mapping[str, Any]], execution_count: int | None
    ) -> None:
        """Set a code cell's outputs and execution count in the shared document."""

        def code_cell(nb: YNotebook) -> Map[Any]:
            ycell: Map[Any] = nb.ycells[_index(nb, cell_id)]
            if ycell.get("cell_type") != "code":
                raise DocumentError(
                    f"cell {cell_id!r} is a {ycell.get('cell_type')} cell; only code cells have outputs"
                )
            return ycell

        def running(nb: YNotebook) -> None:
            # A view marks a cell whose source changed since it ran ("dirty") until it sees the
            # cell go through "running": the run is shown as a front end's own run would be.
            code_cell(nb)["execution_state"] = "running"

        def done(nb: YNotebook) -> None:
            ycell = code_cell(nb)
            youtputs = ycell.get("outputs")
            if isinstance(youtputs, Array):
                youtputs.clear()
                youtputs.extend([_youtput(o) for o in outputs])
            else:
                ycell["outputs"] = Array([_youtput(o) for o in outputs])
            ycell["execution_count"] = execution_count
            ycell["execution_state"] = "idle"

        await self._change(what="write the outputs", edits=(running, done))

    async def close(self) -> None:
        """Leave the room (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for room in (self._room, self._presence):
            if room is not None:
                await asyncio.wrap_future(_submit(room.close()))
        self._room = self._presence = None

    # -- plumbing -------------------------------------------------------------------------------

    async def _change(self, *, what: str, edits: Sequence[Callable[[YNotebook], None]]) -> None:
        await self._call(lambda room: room.change(*edits, timeout=self.timeout), what)

    async def _call(self, op: Callable[[Room], Awaitable[T]], what: str) -> T:
        """Run `op` on the live loop, reopening a lost room once; bounded, whatever the server does."""
        if self._closed:
            raise DocumentError(f"the live document {self.path!r} was closed")
        future = _submit(self._attempts(op, what))
        # Two tries, each of which can take an open and an answer: never longer than that.
        budget = 4 * self.timeout + 2.0
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), budget)
        except asyncio.TimeoutError as exc:
            future.cancel()
            raise DocumentError(
                f"could not {what} in {self.path!r}: the Jupyter server did not answer within {budget:g} s"
            ) from exc

    async def _current_room(self) -> Room:
        """The open room, reopened when lost; one reopening at a time (parallel tool calls)."""
        if self._reopening is None:
            self._reopening = asyncio.Lock()
        async with self._reopening:
            if self._room is None or self._room.lost is not None:
                if self._room is not None:
                    await self._room.close()
                self._room = None
                self._room = await open_room(self._found, timeout=self.timeout)
            return self._room

    async def _attempts(self, op: Callable[[Room], Awaitable[T]], what: str) -> T:
        first: str | None = None
        for attempt in range(2):
            try:
                return await op(await self._current_room())
            except (RoomLost, Unavailable) as exc:
                if attempt == 0 and first is None:
                    first = str(exc)
                    continue
                edit = what != "read the cells"
                maybe = " It may still appear if the server had received it: check with `cells`." if edit else ""
                raise DocumentError(
                    f"could not {what} in {self.path!r}: {first}; reconnecting failed too: {exc}.{maybe}"
                ) from exc
        raise AssertionError("unreachable")
