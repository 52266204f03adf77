"""The cold-start transport: its SSE decoder, and which transport a process's calls take.

Everything the transport sends and reads is also covered by the provider suites, which run each
test through the SDK and over plain httpx2 (conftest.transport).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from flue_nb.runtime.providers._anthropic_http import Fields, SSEDecoder
from tests.anthropic_server import AnthropicServer, stream, text


def decode(*chunks: bytes) -> list[tuple[str | None, str]]:
    decoder = SSEDecoder()
    return [event for chunk in chunks for event in decoder.feed(chunk)] + list(decoder.close())


def test_events_end_at_a_blank_line_whatever_the_line_ending() -> None:
    for eol in (b"\n", b"\r\n", b"\r"):
        raw = b"event: a" + eol + b"data: 1" + eol + eol + b"event: b" + eol + b"data: 2" + eol + eol
        assert decode(raw) == [("a", "1"), ("b", "2")], eol


def test_an_event_split_anywhere_between_chunks_decodes_the_same() -> None:
    raw = 'event: content_block_delta\r\ndata: {"text": "café ✓"}\r\n\r\n'.encode()
    whole = decode(raw)
    assert whole == [("content_block_delta", '{"text": "café ✓"}')]
    for cut in range(1, len(raw)):  # including inside CRLF and inside a multi-byte character
        assert decode(raw[:cut], raw[cut:]) == whole, cut


def test_data_lines_join_comments_are_skipped_and_an_unfinished_event_is_dropped() -> None:
    raw = b": keep-alive\nevent: x\ndata: one\ndata:two\nid: 7\nretry: 10\n\nevent: cut\ndata: off"
    assert decode(raw) == [("x", "one\ntwo")]


def test_a_line_that_is_not_utf8_raises() -> None:
    with pytest.raises(UnicodeDecodeError):
        decode(b"data: caf\xe9\n\n")


def test_fields_read_like_the_sdks_models() -> None:
    event = Fields(json.loads('{"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 3}}}'))
    assert event.type == "message_start" and event.message.model == "m"
    assert event.message.usage.input_tokens == 3 and event.message.usage.output_tokens is None
    assert getattr(event.message.usage, "cache_read_input_tokens", None) is None


# --- which transport a call takes ----------------------------------------------------------------


def _in_fresh_python(script: str, server: AnthropicServer, **env: str) -> None:
    code = textwrap.dedent(
        f"""
        import asyncio, sys
        from flue_nb.runtime.messages import UserMessage
        from flue_nb.runtime.providers import anthropic as provider
        from flue_nb.runtime.providers.model import ModelRequest

        model = provider.AnthropicModel("claude-sonnet-4-6", api_key="k", base_url={server.url!r})

        def call():
            async def go():
                async for _ in model.stream(ModelRequest(system="s", messages=[UserMessage("hi")])):
                    pass
            asyncio.run(go())
        """
    ) + textwrap.dedent(script)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    full_env.pop("FLUE_ANTHROPIC_TRANSPORT", None)
    full_env.update(env)
    done = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_cold_process_sends_its_first_call_without_waiting_for_the_sdk(server: AnthropicServer) -> None:
    server.enqueue(stream(text("one")), stream(text("two")))
    _in_fresh_python(
        """
        assert "anthropic" not in sys.modules
        call()  # the SDK is not loaded: plain httpx2, and the SDK starts loading meanwhile
        provider._SDK_LOADER[0].join(60)
        assert provider.sdk_loaded()
        call()
        """,
        server,
    )
    agents = [r.headers["user-agent"] for r in server.requests]
    assert agents[0].startswith("flue-nb") and "Anthropic/Python" in agents[1], agents


def test_a_pinned_transport_is_kept(server: AnthropicServer) -> None:
    server.enqueue(stream(text("one")), stream(text("two")))
    _in_fresh_python(
        """
        call()
        call()
        assert "anthropic" not in sys.modules and not provider._SDK_LOADER  # never loaded
        """,
        server,
        FLUE_ANTHROPIC_TRANSPORT="http",
    )
    assert all(r.headers["user-agent"].startswith("flue-nb") for r in server.requests)
    server.enqueue(stream(text("three")))
    _in_fresh_python("call()", server, FLUE_ANTHROPIC_TRANSPORT="sdk")
    assert "Anthropic/Python" in server.requests[-1].headers["user-agent"]
