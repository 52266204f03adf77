"""flue_nb's Jupyter server extension: the kernel's notebook edits, carried to the open tab.

The kernel `POST`s `{path, op, args}` to `flue-nb/frontend` with the server's token (as the live
document path finds its server, `servers.py`). The server asks every connected front end over
jupyter_server's event bus which of them has `path` open (`probe`), picks one (focused, visible,
most recently active: several tabs get the edit once), sends it the operation, and answers with
the tab's reply, or says why there is none. Every wait is bounded. The front-end half is the
`flue-nb` labextension beside this module (`labextension/`); the same bus is what
jupyterlab-commands-toolkit uses, spoken directly here so flue_nb brings no jupyter_server into
kernel-only environments. Loaded only by a Jupyter server (`jupyter_server_config.d/flue_nb.json`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

__all__ = ["REPLY", "REQUEST", "choose"]

REQUEST = "https://flue-nb.github.io/events/frontend-request/v1"
REPLY = "https://flue-nb.github.io/events/frontend-reply/v1"
PROBE_WINDOW = 0.4
"""Seconds to wait for more tabs after the first one answered the probe."""
PROBE_TIMEOUT = 3.0
"""Seconds to wait for any tab to answer the probe."""
OP_TIMEOUT = 10.0
"""Default seconds for the chosen tab to apply an operation and answer."""
EXPIRY_MARGIN = 1.0
"""Seconds before the server stops waiting that the tab stops accepting the operation: a tab that
gets it later (asleep, throttled, busy) refuses it instead of applying an edit the kernel was
already told did not happen; the margin covers the answer's way back."""

_SCHEMAS: list[dict[str, Any]] = [
    {
        "$id": REQUEST,
        "version": "1",
        "title": "A notebook operation for flue_nb's front end",
        "personal-data": True,
        "description": "Sent by the server to the connected front ends; `client` (when set) names the one that acts.",
        "type": "object",
        "required": ["request", "op", "path"],
        "properties": {
            "request": {"title": "request", "type": "string", "description": "Id the reply names."},
            "op": {
                "title": "op",
                "type": "string",
                "description": "probe, cells, insert, edit, delete, move, outputs.",
            },
            "path": {"title": "path", "type": "string", "description": "The notebook's path on the server."},
            "client": {"title": "client", "type": "string", "description": "The front end that acts."},
            "args": {"title": "args", "type": "object", "description": "The operation's arguments."},
            "probe": {"title": "probe", "type": "string", "description": "The probe the acting front end answered."},
            "expires_in": {
                "title": "expires_in",
                "type": "number",
                "description": "Milliseconds after its probe answer past which the front end must not act.",
            },
        },
    },
    {
        "$id": REPLY,
        "version": "1",
        "title": "A flue_nb front end's answer",
        "personal-data": True,
        "description": "Sent by a front end for a request it handled.",
        "type": "object",
        "required": ["request", "client", "data"],
        "properties": {
            "request": {"title": "request", "type": "string", "description": "The request's id."},
            "client": {"title": "client", "type": "string", "description": "The answering front end."},
            "data": {"title": "data", "type": "object", "description": "The result."},
        },
    },
]


def choose(probes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The tab that gets the operation: one with the notebook open, focused first, then visible,
    then the most recently active (None when no tab has it open)."""
    open_ = [p for p in probes if p.get("open")]
    if not open_:
        return None
    return max(open_, key=lambda p: (bool(p.get("focused")), bool(p.get("visible")), p.get("last_active") or 0))


class Bus:
    """Requests to the front ends and their replies, on the server's event logger."""

    def __init__(self, event_logger: Any) -> None:
        self.events = event_logger
        self.waiting: dict[str, asyncio.Queue[dict[str, Any]]] = {}

    async def on_reply(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """The event listener of replies: hand each to the request waiting for it."""
        queue = self.waiting.get(str(data.get("request")))
        if queue is not None:
            queue.put_nowait({"client": data.get("client"), **(data.get("data") or {})})

    def _send(self, request: str, body: dict[str, Any]) -> bool:
        self.waiting[request] = asyncio.Queue()
        sent = self.events.emit(schema_id=REQUEST, data={"request": request, **body})
        if sent is None:  # no front end has the event socket open
            self.waiting.pop(request, None)
        return sent is not None

    async def probe(self, path: str) -> list[dict[str, Any]] | None:
        """Every answering tab's probe (None: no front end is connected at all)."""
        request = uuid.uuid4().hex
        if not self._send(request, {"op": "probe", "path": path}):
            return None
        queue = self.waiting[request]
        found: list[dict[str, Any]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PROBE_TIMEOUT
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    return found
                try:
                    answer = await asyncio.wait_for(queue.get(), left)
                except asyncio.TimeoutError:
                    return found
                found.append({**answer, "probe": request, "answered": loop.time()})
                deadline = min(deadline, loop.time() + PROBE_WINDOW)
        finally:
            self.waiting.pop(request, None)

    async def apply(self, path: str, op: str, args: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Run `op` in one tab that has `path` open; the tab's answer, or `{"ok": False, "reach": why}`."""
        probes = await self.probe(path)
        if probes is None or not probes:
            return {"ok": False, "reach": "no_front_end", "error": "no front end is connected to the Jupyter server"}
        tab = choose(probes)
        if tab is None:
            return {
                "ok": False,
                "reach": "not_open",
                "error": f"no open tab has {path} open ({len(probes)} tab(s) answered)",
            }
        request = uuid.uuid4().hex
        # The deadline in the tab's own clock, counted from when it answered the probe (no clock
        # is compared across machines): the probe's answer took some time to arrive, so the tab's
        # deadline falls before the server gives up.
        since = asyncio.get_running_loop().time() - float(tab["answered"])
        expires_in = max(0.0, since + timeout - min(EXPIRY_MARGIN, timeout / 4)) * 1000
        body = {"op": op, "path": path, "client": str(tab["client"]), "args": args,
                "probe": str(tab["probe"]), "expires_in": expires_in}  # fmt: skip
        if not self._send(request, body):
            return {"ok": False, "reach": "no_front_end", "error": "the front end disconnected"}
        try:
            reply = await asyncio.wait_for(self.waiting[request].get(), timeout)
        except asyncio.TimeoutError:
            return {
                "ok": False, "reach": "no_answer",
                "error": f"the tab with {path} open did not answer within {timeout:g} s (closed, asleep or "
                "reloading?); it will not apply the change later (the request expired)",
            }  # fmt: skip
        finally:
            self.waiting.pop(request, None)
        return {**reply, "tabs": sum(1 for p in probes if p.get("open"))}


def _handler_class() -> Any:
    from jupyter_server.base.handlers import APIHandler
    from tornado import web

    class FrontEndHandler(APIHandler):  # type: ignore[misc]
        """`POST flue-nb/frontend`: one operation on the notebook open in a tab."""

        def initialize(self, bus: Bus) -> None:
            self.bus = bus

        @web.authenticated
        async def post(self) -> None:
            body = json.loads(self.request.body or b"{}")
            path, op = body.get("path"), body.get("op")
            if not isinstance(path, str) or not isinstance(op, str):
                raise web.HTTPError(400, "give `path` and `op`")
            if op == "ping":  # the kernel asks whether this server runs the extension
                self.finish(json.dumps({"ok": True}))
                return
            timeout = min(float(body.get("timeout") or OP_TIMEOUT), 60.0)
            self.finish(json.dumps(await self.bus.apply(path, op, dict(body.get("args") or {}), timeout)))

    return FrontEndHandler


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "flue_nb.notebook.document.frontend_server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "flue-nb"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from jupyter_server.utils import url_path_join

    for schema in _SCHEMAS:
        serverapp.event_logger.register_event_schema(schema)
    bus = Bus(serverapp.event_logger)
    serverapp.event_logger.add_listener(schema_id=REPLY, listener=bus.on_reply)
    route = url_path_join(serverapp.web_app.settings["base_url"], "flue-nb/frontend")
    serverapp.web_app.add_handlers(".*$", [(route, _handler_class(), {"bus": bus})])
    serverapp.log.info("flue_nb: live edits through the open tab at %s", route)
