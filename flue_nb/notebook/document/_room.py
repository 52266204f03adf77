"""One connection to a notebook's collaboration room: the Y sync protocol over a websocket.

Built on `pycrdt` (the Y document, the sync and awareness messages), `jupyter_ydoc.YNotebook`
(the notebook schema JupyterLab and the server share) and `websockets`. Our own updates are sent
by the operation that made them, and `confirm()` waits for the server's answer to a sync step 1
sent after them: the server handles one client's messages in order, so that answer means every
edit before it is in the server's document (and so in every open view). An edit is never
reported done on the strength of a local change alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import Callable
from typing import Any

from jupyter_ydoc import YNotebook
from pycrdt import (
    Awareness,
    Doc,
    YMessageType,
    YSyncMessageType,
    create_awareness_message,
    create_sync_message,
    create_update_message,
    handle_sync_message,
    read_message,
)
from websockets.asyncio.client import ClientConnection, connect

from flue_nb.notebook.document.servers import Server

__all__ = ["Room", "RoomLost", "presence_url", "room_url"]

AWARENESS_RENEW = 10.0
"""Seconds between awareness renewals (peers drop a state not renewed for 30 s)."""
MAX_MESSAGE = 64 * 1024 * 1024
"""The largest websocket message accepted: a notebook with big outputs syncs in one message."""

AGENT_USER = {
    "username": "flue-agent",
    "name": "flue agent",
    "display_name": "flue agent",
    "initials": "FA",
    "color": "#7c4dff",
    "avatar_url": None,
}
"""The collaboration identity the agent's edits show under (JupyterLab's awareness `user` shape)."""
PRESENCE_ROOM = "JupyterLab:globalAwareness"
"""The room whose awareness JupyterLab's collaborators panel lists (who is on, which document)."""


class RoomLost(Exception):
    """The connection closed, failed or stopped answering; the message says which."""


def room_url(server: Server, file_id: str, session_id: str) -> str:
    """The websocket URL of a notebook's room, from `PUT api/collaboration/session/<path>`'s answer."""
    base = urllib.parse.urlsplit(urllib.parse.urljoin(server.url, f"api/collaboration/room/json:notebook:{file_id}"))
    scheme = "wss" if base.scheme == "https" else "ws"
    query = urllib.parse.urlencode({"sessionId": session_id})
    return urllib.parse.urlunsplit((scheme, base.netloc, base.path, query, ""))


def presence_url(server: Server) -> str:
    """The websocket URL of the server's presence room (`PRESENCE_ROOM`: awareness only, no document)."""
    base = urllib.parse.urlsplit(urllib.parse.urljoin(server.url, f"api/collaboration/room/{PRESENCE_ROOM}"))
    return urllib.parse.urlunsplit(("wss" if base.scheme == "https" else "ws", base.netloc, base.path, "", ""))


class Room:
    """A synced copy of the notebook's Y document, connected to the server's room."""

    def __init__(self, ws: ClientConnection, user: dict[str, Any]) -> None:
        self._ws = ws
        self.ydoc: Doc[Any] = Doc()
        self.awareness = Awareness(self.ydoc)
        self.notebook = YNotebook(ydoc=self.ydoc, awareness=self.awareness)
        self._user = user
        self._asked = 0  # sync step 1 messages sent to the server
        self._answers = 0  # its step 2 answers received: it answers one client in order
        self._answered = asyncio.Condition()
        self._lost: str | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def open(
        cls,
        url: str,
        token: str,
        *,
        timeout: float,
        user: dict[str, Any] = AGENT_USER,
        state: dict[str, Any] | None = None,
    ) -> Room:
        """Connect, sync the whole document and announce the agent (its `user`, and any other
        awareness `state` fields), within `timeout` seconds."""
        headers = {"Authorization": f"token {token}"} if token else None
        try:
            ws = await asyncio.wait_for(
                connect(
                    url,
                    additional_headers=headers,
                    open_timeout=timeout,
                    max_size=MAX_MESSAGE,
                    close_timeout=1,
                    proxy=None,  # the kernel's own server: never through an internet proxy
                ),
                timeout,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise RoomLost(f"the collaboration websocket did not open ({type(exc).__name__}: {exc})") from exc
        except Exception as exc:  # websockets' InvalidStatus/InvalidHandshake: refused by the server
            raise RoomLost(f"the server refused the collaboration websocket ({exc})") from exc
        room = cls(ws, user)
        room._tasks = [asyncio.create_task(room._listen()), asyncio.create_task(room._renew_awareness())]
        try:
            await room.confirm(timeout, first=True)
        except BaseException:
            await room.close()
            raise
        room.awareness.set_local_state_field("user", user)
        for key, value in (state or {}).items():
            room.awareness.set_local_state_field(key, value)
        await room._send_awareness()
        return room

    @property
    def lost(self) -> str | None:
        """Why the connection is gone, or None while it is up."""
        return self._lost

    async def _send(self, message: bytes) -> None:
        if self._lost is not None:
            raise RoomLost(self._lost)
        try:
            await self._ws.send(message)
        except Exception as exc:  # ConnectionClosed and transport errors alike: the room is gone
            self._lose(f"sending to the server failed ({type(exc).__name__}: {exc})")
            raise RoomLost(self._lost or "lost") from exc

    def _lose(self, why: str) -> None:
        if self._lost is None:
            self._lost = why

    async def _listen(self) -> None:
        try:
            async for message in self._ws:
                if not isinstance(message, bytes) or len(message) < 2:
                    continue
                if message[0] == YMessageType.SYNC:
                    reply = handle_sync_message(message[1:], self.ydoc)
                    if reply is not None:
                        await self._ws.send(reply)
                    if message[1] == YSyncMessageType.SYNC_STEP2:
                        async with self._answered:
                            self._answers += 1
                            self._answered.notify_all()
                elif message[0] == YMessageType.AWARENESS:
                    known = set(self.awareness.states)
                    with contextlib.suppress(Exception):  # a peer's malformed awareness is theirs
                        self.awareness.apply_awareness_update(read_message(message[1:]), "remote")
                    if set(self.awareness.states) - known:
                        # The server does not replay states to a newcomer: greet it now, not at
                        # the next renewal, so a view opened meanwhile shows the agent at once.
                        await self._send_awareness()
            self._lose("the server closed the collaboration websocket")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the socket ends the room, said in `lost`
            self._lose(f"the collaboration websocket failed ({type(exc).__name__}: {exc})")
        finally:
            async with self._answered:
                self._answered.notify_all()

    async def _send_awareness(self) -> None:
        update = self.awareness.encode_awareness_update([self.awareness.client_id])
        await self._send(create_awareness_message(update))

    async def _renew_awareness(self) -> None:
        with contextlib.suppress(RoomLost):
            while True:
                await asyncio.sleep(AWARENESS_RENEW)
                self.awareness.set_local_state(self.awareness.get_local_state())
                await self._send_awareness()

    async def change(self, *edits: Callable[[YNotebook], Any], timeout: float) -> None:
        """Apply each edit in a transaction of its own, send them, and wait for the server to have them."""
        for edit in edits:
            before = self.ydoc.get_state()
            with self.ydoc.transaction(origin="flue"):
                edit(self.notebook)
            await self._send(create_update_message(self.ydoc.get_update(before)))
        await self.confirm(timeout)

    async def confirm(self, timeout: float, *, first: bool = False) -> None:
        """Send a sync step 1 and wait for the server's step 2: everything sent before it has landed."""
        # Numbered before the send, with no await between: answers come back in this order, so
        # a call made while another waits is confirmed by its own answer, not the earlier one.
        self._asked += 1
        mine = self._asked
        await self._send(create_sync_message(self.ydoc))
        what = "send the notebook" if first else "confirm the edit"

        async def answered() -> None:
            async with self._answered:
                await self._answered.wait_for(lambda: self._answers >= mine or self._lost is not None)

        try:
            await asyncio.wait_for(answered(), timeout)
        except asyncio.TimeoutError as exc:
            self._lose(f"the server did not {what} within {timeout:g} s")
            raise RoomLost(self._lost or "timeout") from exc
        if self._answers < mine:
            raise RoomLost(self._lost or "lost")

    async def close(self) -> None:
        """Leave the room: tell the peers the agent is gone, then close the socket (bounded)."""
        if self._lost is None:
            with contextlib.suppress(Exception):
                self.awareness.set_local_state(None)
                await asyncio.wait_for(self._send_awareness(), 1.0)
        self._lose("closed")
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._ws.close(), 2.0)
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
