"""A loopback Messages API that applies Anthropic's prompt-cache rules to what it is sent.

The rules, as Anthropic's prompt-caching guide states them (read 2026-12-01):
- A request is a sequence of blocks in the order tools → system → messages (each tool, each
  system block and each message content block is one block). A block with `cache_control` is a
  breakpoint; a top-level `cache_control` (automatic caching) puts one on the last block. More
  than 4 breakpoints is a 400.
- At each breakpoint the cache is checked for the prefix ending there and, walking backwards, at
  most 20 blocks before it (the lookback window); the longest prefix found is read
  (`cache_read_input_tokens`). A prefix matches only byte for byte, under the same model.
- Each breakpoint past what was read writes its prefix (`cache_creation_input_tokens`: the tokens
  between what was read and the last breakpoint written), if the prefix is at least the model
  family's minimum cacheable length (1,024 tokens for Sonnet and Opus up to 4.1, 2,048 for Haiku
  3/3.5, 4,096 for Opus 4.5+ and Haiku 4.5+). Tokens after the last breakpoint are plain input.
- An entry lives 5 minutes, refreshed each time it is read.

Tokens are counted as a block's canonical JSON length / 4 (the server has no Claude tokenizer;
what matters here is that the counts are the same for every client it compares).

`CacheServer(brain)` answers each request with `brain(body) -> [blocks]` (text and tool_use
blocks), streamed as the API streams them, with the cache accounting in `usage`. Besides what the
API reports, it keeps per request the "limit": the longest prefix (in blocks) this request shares
with any request sent before it within the lifetime — all a cache could ever have read.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["CacheServer", "Served"]

LOOKBACK = 20
MAX_BREAKPOINTS = 4
TTL = 300.0


def min_cacheable(model: str) -> int:
    """The model family's minimum cacheable prefix, in tokens."""
    m = model.lower()
    if "haiku" in m:
        return 2048 if any(v in m for v in ("haiku-3", "3-haiku", "3-5-haiku")) else 4096
    if "opus" in m and not any(v in m for v in ("opus-4-1", "opus-4-0", "opus-4-2025", "3-opus")):
        return 4096
    return 1024


@dataclass
class Served:
    """What one request cost, as the API would report it, beside the limit."""

    prompt: int
    read: int
    written: int
    uncached: int
    limit: int
    """Tokens of the longest prefix shared with an earlier request (what a cache could read)."""
    blocks: int
    breakpoints: int
    tools: int
    """Tools the request offered (0: a compaction's summary request)."""


@dataclass
class _Cache:
    entries: dict[str, float] = field(default_factory=dict)  # prefix key -> expiry
    seen: dict[str, float] = field(default_factory=dict)  # every prefix key sent -> expiry
    lock: threading.Lock = field(default_factory=threading.Lock)


def _blocks(body: dict[str, Any]) -> tuple[list[str], list[int], list[bool]]:
    items: list[Any] = list(body.get("tools") or [])
    system = body.get("system")
    if isinstance(system, str):
        items.append({"type": "text", "text": system})
    elif system:
        items.extend(system)
    for msg in body.get("messages") or []:
        content = msg["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content:
            items.append({"role": msg["role"], **block})
    marks = [isinstance(b, dict) and "cache_control" in b for b in items]
    if body.get("cache_control") and items:
        marks[-1] = True  # automatic caching: the last cacheable block
    canon = [json.dumps({k: v for k, v in b.items() if k != "cache_control"}, sort_keys=True) for b in items]
    tokens = [max(1, len(c) // 4) for c in canon]
    return canon, tokens, marks


def _keys(model: str, canon: list[str]) -> list[str]:
    h = hashlib.sha256(model.encode())
    out = []
    for c in canon:
        h.update(b"\x00" + c.encode())
        out.append(h.copy().hexdigest())
    return out


def account(cache: _Cache, body: dict[str, Any], now: float) -> Served:
    """Apply the cache rules to one request and remember what it wrote."""
    model = str(body.get("model"))
    canon, tokens, marks = _blocks(body)
    keys = _keys(model, canon)
    cum = [0]
    for t in tokens:
        cum.append(cum[-1] + t)
    points = [i for i, m in enumerate(marks) if m]
    if len(points) > MAX_BREAKPOINTS:
        raise ValueError(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(points)}."
        )
    floor = min_cacheable(model)
    with cache.lock:
        live = {k: e for k, e in cache.entries.items() if e > now}
        cache.entries = live
        hit = -1
        for p in points:
            for j in range(p, max(-1, p - LOOKBACK), -1):
                if keys[j] in live:
                    hit = max(hit, j)
                    break
        if hit >= 0:
            cache.entries[keys[hit]] = now + TTL
        written_to = hit
        for p in points:
            if p > hit and cum[p + 1] >= floor:
                cache.entries[keys[p]] = now + TTL
                written_to = max(written_to, p)
        limit_blocks = 0
        seen = {k: e for k, e in cache.seen.items() if e > now}
        for i in range(len(keys) - 1, -1, -1):
            if keys[i] in seen:
                limit_blocks = i + 1
                break
        for k in keys:
            seen[k] = now + TTL
        cache.seen = seen
    read = cum[hit + 1]
    written = cum[written_to + 1] - read
    return Served(
        cum[-1],
        read,
        written,
        cum[-1] - read - written,
        cum[limit_blocks],
        len(keys),
        len(points),
        len(body.get("tools") or []),
    )


class CacheServer:
    """The loopback server; `served` lists every request's accounting in arrival order."""

    def __init__(self, brain: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> None:
        self.brain = brain
        self.cache = _Cache()
        self.served: list[Served] = []
        self.hold: Callable[[dict[str, Any]], bool] = lambda body: False
        """Requests for which this returns True are accounted, then never answered (a crash)."""
        self.held = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                try:
                    served = account(server.cache, body, time.time())
                except ValueError as exc:
                    self._json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": str(exc)}})
                    return
                server.served.append(served)
                if server.hold(body):
                    server.held.set()
                    time.sleep(600)
                    return
                self._stream(body, served, server.brain(body))

            def _json(self, status: int, data: dict[str, Any]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _stream(self, body: dict[str, Any], s: Served, blocks: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                out = sum(max(1, len(json.dumps(b)) // 4) for b in blocks)
                usage = {
                    "input_tokens": s.uncached,
                    "cache_creation_input_tokens": s.written,
                    "cache_read_input_tokens": s.read,
                    "output_tokens": 1,
                }
                msg = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"], "content": []}
                self._event("message_start", {"type": "message_start", "message": {**msg, "usage": usage}})
                for i, b in enumerate(blocks):
                    if b["type"] == "text":
                        self._event(
                            "content_block_start",
                            {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                        )
                        self._event(
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": i,
                                "delta": {"type": "text_delta", "text": b["text"]},
                            },
                        )
                    else:
                        start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                        self._event(
                            "content_block_start", {"type": "content_block_start", "index": i, "content_block": start}
                        )
                        delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
                        self._event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
                    self._event("content_block_stop", {"type": "content_block_stop", "index": i})
                stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
                self._event(
                    "message_delta",
                    {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": out}},
                )
                self._event("message_stop", {"type": "message_stop"})
                self.wfile.flush()

            def _event(self, name: str, data: dict[str, Any]) -> None:
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop listening."""
        self._httpd.shutdown()
        self._httpd.server_close()
