"""The HTTP plumbing of the loopback fake APIs (`anthropic_server`, `openai_server`).

`FakeServer` listens on 127.0.0.1 (a free port) in a daemon thread, keeps every request it gets
in `requests` and hands out scripted replies in order; `FakeHandler` reads and records a request
and writes JSON or a chunked event stream. Each fake adds only its own API's shapes.
"""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Generic, TypeVar

from typing_extensions import Self

__all__ = ["FakeHandler", "FakeServer", "RecordedRequest", "split"]

R = TypeVar("R")


@dataclass
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: dict[str, Any]


def split(s: str, n: int) -> list[str]:
    """`s` in `n` pieces of about the same size (one empty piece for an empty string)."""
    size = max(1, -(-len(s) // max(1, n)))
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


class FakeServer(Generic[R]):
    """A threaded loopback server serving queued replies of type `R` and recording requests."""

    handler: ClassVar[type[FakeHandler]]
    """The handler class answering for this kind of server (it reaches the server as `fake`)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._replies: queue.Queue[R] = queue.Queue()
        handler = type("Handler", (self.handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        # A short poll interval keeps `stop()` (every test's teardown) fast.
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        """The server's root URL."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def enqueue(self, *replies: R) -> None:
        """Queue replies for the next requests, in order."""
        for r in replies:
            self._replies.put(r)

    def next_reply(self) -> R:
        """The next scripted reply, or a loud error reply when the script ran out."""
        try:
            return self._replies.get_nowait()
        except queue.Empty:
            return self.no_reply_left()

    def no_reply_left(self) -> R:
        """The reply (an HTTP 500 of the API's shape) when no scripted reply is left."""
        raise NotImplementedError

    def start(self) -> Self:
        """Start serving in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeHandler(BaseHTTPRequestHandler):
    """Reads, records and answers one request of a `FakeServer`."""

    fake: Any
    # HTTP/1.1 so the client keeps connections alive and chunked bodies are possible.
    protocol_version = "HTTP/1.1"
    request_id_header = "request-id"

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib names it `format`
        pass  # keep test output clean

    def record(self, method: str) -> dict[str, Any]:
        """Read the request's JSON body and keep the request in the server's `requests`."""
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: dict[str, Any] = json.loads(raw or b"{}")
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.fake.requests.append(RecordedRequest(method, self.path, headers, body))
        return body

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        """A complete JSON response (with a request id, as the real APIs send)."""
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header(self.request_id_header, "req_test")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def write_chunk(self, data: bytes) -> None:
        """One chunk of a chunked body, sent at once."""
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_chunks(self) -> None:
        """The last, empty chunk of a chunked body."""
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
