"""The filtering proxy: the only way out of a contained command's network namespace.

An HTTP proxy on a Unix socket (in a private 0700 directory), served by its own thread and event
loop so it answers whatever the kernel's loops are doing. `CONNECT host:port` (HTTPS, and any TCP
protocol a client tunnels) and absolute-form requests (`GET http://host/...`) are let through
only when the host matches `allow_hosts`; anything else gets `403` with a body saying which host
was refused and how to allow it. The name the client asked for is what is checked (DNS is
resolved out here), so a sandbox cannot reach an unlisted host by naming its address.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fnmatch
import os
import threading
from collections.abc import Sequence
from urllib.parse import urlsplit

from flue_nb.runtime.tempdirs import private_dir, remove

__all__ = ["HostProxy", "host_allowed", "proxy_for"]

_HEAD_LIMIT = 64 * 1024
_CONNECT_TIMEOUT = 30.0
_HOP_HEADERS = (b"proxy-connection", b"connection", b"keep-alive", b"proxy-authorization")


def _split_rule(rule: str) -> tuple[str, int | None]:
    if rule.startswith("["):  # [v6]:port
        host, _, rest = rule[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    host, sep, port = rule.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host, int(port)
    return rule, None


def host_allowed(host: str, port: int, rules: Sequence[str]) -> bool:
    """Whether `host:port` matches a rule: `name`, `*.domain` (its subdomains), either with `:port`."""
    host = host.lower().rstrip(".").strip("[]")
    for rule in rules:
        pattern, only = _split_rule(rule.lower())
        if only is not None and only != port:
            continue
        if fnmatch.fnmatchcase(host, pattern):
            return True
    return False


def _target(method: bytes, target: bytes) -> tuple[str, int, bytes] | None:
    """(host, port, origin-form path) of a request, or None when it names no host."""
    text = target.decode("latin-1")
    if method == b"CONNECT":
        parts = urlsplit(f"//{text}")
        if not parts.hostname or parts.port is None:
            return None
        return parts.hostname, parts.port, b""
    parts = urlsplit(text)
    if parts.scheme != "http" or not parts.hostname:
        return None
    try:
        port = parts.port or 80
    except ValueError:
        return None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.hostname, port, path.encode("latin-1")


def _reply(status: str, text: str) -> bytes:
    body = text.encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        pass


class HostProxy:
    """The proxy for one allowlist; started on first use, serving until the process ends."""

    def __init__(self, allow_hosts: Sequence[str]) -> None:
        """Args:
        allow_hosts: Rules `host_allowed` checks each requested host against.
        """
        self.allow_hosts = tuple(allow_hosts)
        self.refused: list[str] = []
        """Hosts asked for and refused, oldest first (the latest 100)."""
        self._lock = threading.Lock()
        self._path: str | None = None
        self._dir: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def socket_path(self) -> str:
        """The Unix socket it serves on; starts the proxy's thread the first time."""
        with self._lock:
            if self._path is None:
                self._start()
            assert self._path is not None
            return self._path

    def _start(self) -> None:
        self._dir = private_dir("flue-proxy-")  # mode 0700: only this user connects
        path = os.path.join(self._dir, "proxy.sock")
        ready = threading.Event()
        failed: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(asyncio.start_unix_server(self._client, path=path, limit=_HEAD_LIMIT))
            except BaseException as exc:  # noqa: BLE001 - reported to the caller below
                failed.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, name="flue-sandbox-proxy", daemon=True).start()
        ready.wait()
        if failed:
            raise failed[0]
        self._loop, self._path = loop, path
        atexit.register(self.close)

    def close(self) -> None:
        """Stop serving and remove the socket."""
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
            if self._dir is not None:
                remove(self._dir)
            self._loop = self._path = self._dir = None

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line, _, headers = head.partition(b"\r\n")
        parts = line.split()
        if len(parts) != 3:
            writer.write(_reply("400 Bad Request", "flue sandbox proxy: not an HTTP proxy request\n"))
            return
        method, target, version = parts
        found = _target(method, target)
        if found is None:
            writer.write(
                _reply(
                    "400 Bad Request",
                    "flue sandbox proxy: use CONNECT host:port (HTTPS) or an absolute http:// URL\n",
                )
            )
            return
        host, port, path = found
        if not host_allowed(host, port, self.allow_hosts):
            self.refused = [*self.refused[-99:], f"{host}:{port}"]
            writer.write(
                _reply(
                    "403 Forbidden",
                    f"flue sandbox: {host}:{port} is not in allow_hosts ({', '.join(self.allow_hosts)}); "
                    "add it to flue.kernel(allow_hosts=[...]) or c.FlueMagics.allow_hosts to reach it.\n",
                )
            )
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host, port), _CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as exc:
            writer.write(_reply("502 Bad Gateway", f"flue sandbox proxy: cannot reach {host}:{port}: {exc}\n"))
            return
        try:
            if method == b"CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                # One request per connection: a second request on it could name another host.
                kept = [
                    h for h in headers.split(b"\r\n") if h and h.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS
                ]
                up_writer.write(b"\r\n".join([b" ".join([method, path, version]), *kept, b"Connection: close"]))
                up_writer.write(b"\r\n\r\n")
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            up_writer.close()
            with contextlib.suppress(OSError):
                await up_writer.wait_closed()


_proxies: dict[tuple[str, ...], HostProxy] = {}
_proxies_lock = threading.Lock()


def proxy_for(allow_hosts: Sequence[str]) -> HostProxy:
    """The process's proxy for this allowlist (one per distinct list, shared by sandboxes)."""
    key = tuple(allow_hosts)
    with _proxies_lock:
        found = _proxies.get(key)
        if found is None:
            found = _proxies[key] = HostProxy(key)
        return found
