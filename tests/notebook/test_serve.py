"""`flue.serve()` in this process (no kernel): options checked, the guard, the warning past loopback."""

from __future__ import annotations

import json

import httpx2
import pytest

import flue_nb as flue
from flue_nb.notebook.serve._calls import call_message, parse_call, play_client
from flue_nb.notebook.serve._http import _loopback_origin
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.messages import ToolResultMessage, UserMessage
from flue_nb.runtime.providers.model import ModelRequest


@pytest.fixture
def served(tmp_path):
    served = flue.serve(namespace={}, db=str(tmp_path / "s.sqlite"), cwd=str(tmp_path))
    yield served
    served.stop()


def _post(served, headers):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    with httpx2.Client(trust_env=False, timeout=10) as client:
        return client.post(served.url, content=json.dumps(body), headers={**base, **headers})


def test_the_guard_wants_the_exact_token_and_a_loopback_origin(served):
    assert _post(served, {}).status_code == 401
    assert _post(served, {"Authorization": f"Bearer {served.token}x"}).status_code == 401
    ok = {"Authorization": f"Bearer {served.token}"}
    assert _post(served, {**ok, "Origin": "https://attacker.example"}).status_code == 403
    # Past the guard, the SDK answers (initialize first: 400, not 401/403).
    assert _post(served, ok).status_code not in (401, 403)
    assert _post(served, {**ok, "Origin": f"http://localhost:{served.port}"}).status_code not in (401, 403)


def test_loopback_origins():
    assert _loopback_origin("http://127.0.0.1:8888") and _loopback_origin("http://[::1]:1")
    assert not _loopback_origin("http://localhost.evil.example") and not _loopback_origin("null")


def test_one_server_per_kernel_and_a_port_in_use_is_named(served, tmp_path):
    with pytest.raises(ConfigError, match="already serves"):
        flue.serve(namespace={})
    served.stop()
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{taken.getsockname()[1]}"):
            flue.serve(namespace={}, port=taken.getsockname()[1], cwd=str(tmp_path))


def test_bad_options_say_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="approval must be"):
        flue.serve(namespace={}, approval="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"unknown tools \['nope'\]"):
        flue.serve(namespace={}, tools=["python", "nope"], cwd=str(tmp_path))
    with pytest.raises(ConfigError, match="busy_timeout"):
        flue.serve(namespace={}, busy_timeout=0)


def test_listening_past_loopback_warns(tmp_path):
    with pytest.warns(UserWarning, match="beyond this machine's loopback"):
        # 127.0.0.2: outside the names served by default, yet still this machine (no traffic leaves).
        served = flue.serve(namespace={}, host="127.0.0.2", cwd=str(tmp_path), db=str(tmp_path / "s.sqlite"))
    served.stop()


def test_the_recorded_call_round_trips_and_the_model_plays_it_once():
    text = call_message("my `client`", "read", "mcp_1", {"path": "a.txt"})
    assert parse_call(text) == ("read", "mcp_1", {"path": "a.txt"})
    assert parse_call("hello") is None
    first = play_client(ModelRequest("", [UserMessage(text)], [], 100))
    assert [(c.name, c.id, c.input) for c in first.tool_calls] == [("read", "mcp_1", {"path": "a.txt"})]
    after = ModelRequest("", [UserMessage(text), ToolResultMessage("mcp_1", "read", "x")], [], 100)
    assert not play_client(after).tool_calls
    assert "no model answers" in play_client(ModelRequest("", [UserMessage("hi")], [], 100)).text


def test_the_guard_takes_headers_as_real_clients_send_them(served):
    # Issue 32.6: `bearer` (RFC 6750: case-insensitive), `LOCALHOST` in Host and Origin, and a
    # Host without a port were refused; a foreign Host on loopback (DNS rebinding) still is.
    ok = {"Authorization": f"bearer {served.token}"}
    assert _post(served, ok).status_code not in (401, 403, 421)
    assert _post(served, {"Authorization": f"BEARER  {served.token}"}).status_code not in (401, 403, 421)
    assert _post(served, {**ok, "Host": f"LOCALHOST:{served.port}"}).status_code not in (401, 403, 421)
    assert _post(served, {**ok, "Origin": f"http://LocalHost:{served.port}"}).status_code not in (401, 403, 421)
    assert _post(served, {**ok, "Host": "localhost"}).status_code not in (401, 403, 421)
    assert _post(served, {**ok, "Host": f"rebound.example:{served.port}"}).status_code == 421
    assert _post(served, {"Authorization": f"Basic {served.token}"}).status_code == 401


def test_serving_every_interface_prints_a_usable_url(tmp_path):
    with pytest.warns(UserWarning, match="beyond this machine's loopback"):
        served = flue.serve(namespace={}, host="", cwd=str(tmp_path), db=str(tmp_path / "s.sqlite"))
    try:
        assert served.url.startswith("http://127.0.0.1:") and served.url.endswith("/mcp")
        ok = {"Authorization": f"Bearer {served.token}"}
        assert _post(served, ok).status_code not in (401, 403, 421)
    finally:
        served.stop()
