"""Hostile or broken servers, on every provider (issue 12 points 2, 3, 10, 11; issue 23 point 4):
malformed streams, silent streams, huge error bodies, numbers JSON cannot carry, a lone
surrogate, the key in use kept out of tool results: once on Anthropic, once on OpenAI's wire."""

from __future__ import annotations

import json
from typing import Any

import pytest

import flue_nb as flue
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.errors import ProviderError
from flue_nb.runtime.providers.model import ResponseDone, TextChunk
from flue_nb.runtime.text import INVALID_INPUT_KEY
from tests.provider_wires import Sleeps, Wire
from tests.provider_wires import collect as run


def session_on(wire: Wire, tmp_path: Any) -> Any:
    model = wire.model()

    @flue.agent
    def tested() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.local(str(tmp_path)))
        return "You are tested."

    return flue.init(tested, db=str(tmp_path / "s.sqlite"), settings=RunSettings(sleep=Sleeps()))


def test_a_malformed_stream_is_a_retryable_provider_error(wire: Wire) -> None:
    wire.enqueue(wire.malformed("hello world"))
    events, exc = run(wire.model())
    assert isinstance(exc, ProviderError), exc
    assert exc.transient and exc.kind == "server" and "malformed" in exc.message
    assert not any(isinstance(e, ResponseDone) for e in events)


def test_a_stream_that_goes_silent_times_out_as_retryable(wire: Wire) -> None:
    wire.enqueue(wire.stall("half of it, then nothing"))
    events, exc = run(wire.model(idle_timeout=0.3))
    assert isinstance(exc, ProviderError) and exc.kind == "timeout" and exc.transient
    assert any(isinstance(e, TextChunk) for e in events)  # it did stall mid-stream


def test_a_huge_error_body_is_capped_in_the_error_and_in_the_store(wire: Wire, tmp_path) -> None:
    body = "x" * 2_000_000
    wire.enqueue(wire.bad_request(body))
    _, exc = run(wire.model())
    assert isinstance(exc, ProviderError) and not exc.transient
    assert len(exc.message) < 3_000 and "more characters" in exc.message
    wire.enqueue(wire.bad_request(body))
    s = session_on(wire, tmp_path)
    with pytest.raises(flue.FlueError):
        s.prompt("hi")
    stored = s.submissions()[0].error
    assert stored is not None and len(json.dumps(stored)) < 5_000


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_tool_input_with_a_number_json_cannot_carry_is_kept_as_invalid(wire: Wire, number: str) -> None:
    raw = f'{{"path": "a.txt", "offset": {number}}}'
    wire.enqueue(wire.raw_call("call_1", "read", raw))
    events, exc = run(wire.model())
    assert exc is None
    assert events[-1].message.tool_calls[0].input == {INVALID_INPUT_KEY: raw}


def test_1e999_from_the_model_comes_back_as_a_validation_result(wire: Wire, tmp_path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    wire.enqueue(wire.raw_call("call_1", "read", '{"path": "a.txt", "offset": 1e999}'), wire.say("A finite offset."))
    s = session_on(wire, tmp_path)
    assert s.prompt("read a.txt") == "A finite offset."
    ((call_id, content),) = wire.tool_results(wire.bodies()[1])
    assert call_id == "call_1" and "Invalid input for tool `read`" in content and "1e999" in content


def test_a_lone_surrogate_spelled_in_stream_json_arrives_escaped(wire: Wire) -> None:
    wire.enqueue(wire.surrogate("start"))
    events, exc = run(wire.model())
    assert exc is None
    assert " odd \\ud800 text" in events[-1].message.text
    assert all(e.text.encode() for e in events if isinstance(e, TextChunk))
