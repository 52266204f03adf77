"""flue_nb's server extension's bus (issue 35), without a server: which tab acts, and the bounds.

A stand-in event logger plays the front ends: it records what the server emits and answers
probes as the tabs would. What the real pages do is the browser test's
(tests/browser/test_frontend_edits_browser.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flue_nb.notebook.document import frontend_server
from flue_nb.notebook.document.frontend_server import Bus, choose


class Tabs:
    """An event logger whose front ends answer probes (`probes`) and, unless `silent`, operations."""

    def __init__(self, bus_of: list[Bus], probes: list[dict[str, Any]], *, silent: bool = False) -> None:
        self.bus_of, self.probes, self.silent = bus_of, probes, silent
        self.sent: list[dict[str, Any]] = []

    def emit(self, *, schema_id: str, data: dict[str, Any]) -> object:
        self.sent.append(data)
        bus = self.bus_of[0]
        loop = asyncio.get_running_loop()
        if data["op"] == "probe":
            for probe in self.probes:
                loop.call_soon(lambda p=probe: asyncio.ensure_future(bus.on_reply(None, "", {
                    "request": data["request"], "client": p["client"], "data": p})))  # fmt: skip
        elif not self.silent:
            answer = {"request": data["request"], "client": data["client"], "data": {"ok": True}}
            loop.call_soon(lambda: asyncio.ensure_future(bus.on_reply(None, "", answer)))
        return data


def _bus(probes: list[dict[str, Any]], *, silent: bool = False) -> tuple[Bus, Tabs]:
    holder: list[Bus] = []
    tabs = Tabs(holder, probes, silent=silent)
    holder.append(Bus(tabs))
    return holder[0], tabs


def test_the_focused_tab_with_the_notebook_open_acts_once():
    probes = [
        {"client": "a", "open": True, "focused": False, "visible": True, "last_active": 5},
        {"client": "b", "open": True, "focused": True, "visible": True, "last_active": 1},
        {"client": "c", "open": False, "focused": True, "visible": True, "last_active": 9},
    ]
    assert choose(probes)["client"] == "b"  # type: ignore[index]
    assert choose([{"client": "c", "open": False}]) is None


def test_an_operation_carries_its_probe_and_a_deadline_before_the_server_gives_up(monkeypatch):
    monkeypatch.setattr(frontend_server, "PROBE_WINDOW", 0.05)
    bus, tabs = _bus([{"client": "a", "open": True}, {"client": "b", "open": True, "focused": True}])
    reply = asyncio.run(bus.apply("fix.ipynb", "edit", {"id": "c1"}, timeout=4.0))
    assert reply["ok"] is True and reply["tabs"] == 2
    probe, op = tabs.sent
    assert op["client"] == "b" and op["probe"] == probe["request"]
    # The tab stops accepting it a margin before the server stops waiting (4 s), counted from
    # when the tab answered the probe.
    assert 2900 <= op["expires_in"] < 4000, op


def test_a_tab_that_does_not_answer_gives_no_answer_within_the_timeout(monkeypatch):
    monkeypatch.setattr(frontend_server, "PROBE_WINDOW", 0.05)
    bus, _ = _bus([{"client": "a", "open": True}], silent=True)
    reply = asyncio.run(bus.apply("fix.ipynb", "edit", {"id": "c1"}, timeout=0.3))
    assert reply["reach"] == "no_answer" and "will not apply the change later" in reply["error"], reply


@pytest.mark.parametrize(("probes", "reach"), [([], "no_front_end"), ([{"client": "a", "open": False}], "not_open")])
def test_no_tab_with_the_notebook_open_is_said_at_once(monkeypatch, probes, reach):
    monkeypatch.setattr(frontend_server, "PROBE_TIMEOUT", 0.2)
    bus, tabs = _bus(probes)
    reply = asyncio.run(bus.apply("fix.ipynb", "insert", {}, timeout=10.0))
    assert reply["reach"] == reach and len(tabs.sent) == 1, reply  # only the probe went out
