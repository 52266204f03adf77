"""Helpers the MCP tests share: the test server's command line, an HTTP server on loopback, and
readers of what the model was sent."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agents import make_agent

import flue_nb as flue
from flue_nb.runtime.messages import SignalMessage, ToolResultMessage

SERVER = Path(__file__).with_name("mcp_server.py")
CALC = [sys.executable, str(SERVER)]


def names(request: Any) -> list[str]:
    """The tool names a request offered the model."""
    return [t.name for t in request.tools]


def results(request: Any) -> list[ToolResultMessage]:
    """The tool results in a request's messages."""
    return [m for m in request.messages if isinstance(m, ToolResultMessage)]


def signals(request: Any) -> list[SignalMessage]:
    """The signals in a request's messages."""
    return [m for m in request.messages if isinstance(m, SignalMessage)]


def calc_agent(model: Any, **kw: Any) -> Any:
    """An agent with the test server mounted as `calc` (keyword arguments go to use_mcp)."""
    return make_agent(model, extra=lambda: flue.use_mcp("calc", command=CALC, **kw))


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(port: int, *flags: str) -> Iterator[subprocess.Popen[bytes]]:
    """The test server on http://127.0.0.1:PORT/mcp, killed on exit."""
    with serving([*CALC, "--http", str(port), *flags], port, "the HTTP server") as proc:
        yield proc


@contextmanager
def serving(
    command: list[str], port: int, what: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `command`, wait until it accepts connections on 127.0.0.1:PORT, kill it on exit."""
    proc = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, f"{what} did not start"
                time.sleep(0.1)
        yield proc
    finally:
        proc.kill()
        proc.wait(10)
