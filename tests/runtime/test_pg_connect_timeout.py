"""An unreachable `postgresql://` URL fails within the stated connect timeout (issue 20.7): the
first connection waits `connect_timeout` in all (5 s by default), not the 30 s a store that was
already connected waits for a restarting server, and the error says how long it waited."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("psycopg")

from flue_nb.runtime.errors import StoreError  # noqa: E402
from flue_nb.runtime.store.postgres import PostgresStore  # noqa: E402


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


def test_an_unreachable_url_fails_after_the_connect_timeout_and_says_so() -> None:
    url = f"postgresql://ann@127.0.0.1:{_closed_port()}/flue"
    with pytest.raises(StoreError) as caught:
        PostgresStore(url, connect_timeout=2.0, reconnect_timeout=600.0)
    message = caught.value.message
    assert "cannot reach the store postgresql://ann@127.0.0.1:" in message
    assert "no answer within 2 s" in message  # the connect timeout, not the 600 s reconnect wait
    assert "check that the server is running" in message
