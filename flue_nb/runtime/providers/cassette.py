"""Record and replay: a live session's model turns saved to a cassette file, replayed offline.

`RecordingModel(model, path)` passes every request through to a real model and appends what it
streamed (or the error it raised) to a JSON cassette. `ReplayModel(path)` answers the same
requests from the cassette, offline and deterministically, and fails with `CassetteDriftError`
as soon as a request differs from the recorded one (the agent, the prompt or the tools changed),
so a recorded notebook becomes a CI test that notices when behaviour moves.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from flue_nb.runtime.errors import CassetteDriftError, ConfigError, FlueError, error_from_dict
from flue_nb.runtime.messages import (
    AssistantMessage,
    Message,
    SignalMessage,
    SummaryMessage,
    ToolResultMessage,
    UserMessage,
    message_from_dict,
    message_to_dict,
)
from flue_nb.runtime.providers.model import (
    Model,
    ModelInfo,
    ModelRequest,
    ResponseDone,
    StreamEvent,
    TextChunk,
    ThinkingChunk,
    ToolCallDelta,
)
from flue_nb.runtime.providers.offline import snapshot

__all__ = ["CassetteDriftError", "RecordingModel", "ReplayModel", "request_key"]

FORMAT = 1


def _message_key(m: Message) -> Any:
    # What must match for a replay to mean anything. Tool result text is left out on purpose:
    # it comes from the user's files and clock (a path listing, a duration) and may vary.
    # Images count by digest for the person's attachments (the input), by number in tool results
    # (a figure's bytes depend on the plotting library's version; that it is there does not).
    if isinstance(m, UserMessage):
        return ["user", m.text, [p.digest for p in m.images]] if m.images else ["user", m.text]
    if isinstance(m, AssistantMessage):
        return ["assistant", m.text, [[c.name, c.input] for c in m.tool_calls]]
    if isinstance(m, ToolResultMessage):
        if m.images:
            return ["tool_result", m.name, m.is_error, len(m.images)]
        return ["tool_result", m.name, m.is_error]
    if isinstance(m, SignalMessage):
        return ["signal", m.signal_type]
    assert isinstance(m, SummaryMessage)
    return ["summary"]


def request_key(request: ModelRequest) -> dict[str, Any]:
    """The parts of a request a replay must see unchanged."""
    return _portable(
        {
            "purpose": request.purpose,
            "system": request.system,
            "tools": [t.name for t in request.tools],
            "messages": [_message_key(m) for m in request.messages],
        }
    )


def _portable(key: dict[str, Any]) -> dict[str, Any]:
    """The key with the process's working directory written as `<cwd>`.

    The system prompt names the working directory, so a cassette recorded in one checkout would
    otherwise drift when CI replays it from another path.
    """
    text = json.dumps(key)
    for cwd in sorted({os.getcwd(), os.path.realpath(os.getcwd())}, key=len, reverse=True):
        if len(cwd) > 1:
            text = text.replace(json.dumps(cwd)[1:-1], "<cwd>")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _images(request: ModelRequest) -> dict[str, dict[str, Any]]:
    """The request's images by digest (what they were, never their bytes): a cassette stays small."""
    return {
        p.digest: {"media_type": p.media_type, "width": p.width, "height": p.height, "label": p.label}
        for p in request.images
    }


def _event_to_dict(ev: StreamEvent) -> dict[str, Any]:
    if isinstance(ev, TextChunk):
        return {"kind": "text_delta", "text": ev.text}
    if isinstance(ev, ThinkingChunk):
        return {"kind": "thinking_delta", "thinking": ev.thinking}
    if isinstance(ev, ToolCallDelta):
        return {"kind": "tool_call_delta", "id": ev.id, "name": ev.name}
    return {"kind": "done", "message": message_to_dict(ev.message)}


def _event_from_dict(d: dict[str, Any]) -> StreamEvent:
    kind = d["kind"]
    if kind == "text_delta":
        return TextChunk(d["text"])
    if kind == "thinking_delta":
        return ThinkingChunk(d["thinking"])
    if kind == "tool_call_delta":
        return ToolCallDelta(d["id"], d["name"])
    msg = message_from_dict(d["message"])
    assert isinstance(msg, AssistantMessage)
    return ResponseDone(msg)


class RecordingModel:
    """Wraps a model and writes every turn it answers to a cassette file."""

    def __init__(self, model: Model, path: str | os.PathLike[str]) -> None:
        self.model = model
        self.path = os.fspath(path)
        info = model.info
        self._data: dict[str, Any] = {
            "format": FORMAT,
            "model": {
                "id": info.id,
                "context_window": info.context_window,
                "max_output_tokens": info.max_output_tokens,
            },
            "turns": [],
        }
        self._save()

    @property
    def info(self) -> ModelInfo:
        """The wrapped model's info."""
        return self.model.info

    def _save(self) -> None:
        # Write-then-rename: a crash mid-write leaves the previous cassette, never half a file.
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".cassette.tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self._data, f, indent=1, ensure_ascii=False)
        os.replace(tmp, self.path)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Pass through to the real model, recording the request and what came back."""
        turn: dict[str, Any] = {"request": request_key(request), "events": []}
        images = _images(request)
        if images:
            turn["images"] = images
        try:
            async for ev in self.model.stream(request):
                turn["events"].append(_event_to_dict(ev))
                yield ev
        except FlueError as exc:
            turn["error"] = exc.to_dict()
            raise
        finally:
            if turn["events"] or "error" in turn:
                self._data["turns"].append(turn)
                self._save()


class ReplayModel:
    """Answers from a cassette, offline; any drift from the recording is an error."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise ConfigError(
                f"no cassette at {self.path!r}: record one first with RecordingModel(model, path)"
            ) from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{self.path!r} is not a cassette ({exc}); record it again") from None
        if data.get("format") != FORMAT:
            raise ConfigError(f"{self.path!r} has cassette format {data.get('format')!r}; this flue_nb reads {FORMAT}")
        m = data["model"]
        self._info = ModelInfo(f"replay:{m['id']}", m["context_window"], m["max_output_tokens"])
        self.turns: list[dict[str, Any]] = data["turns"]
        self.requests: list[ModelRequest] = []

    @property
    def info(self) -> ModelInfo:
        """The recorded model's limits."""
        return self._info

    def assert_complete(self) -> None:
        """Fail if recorded turns were never asked for."""
        if len(self.requests) < len(self.turns):
            raise AssertionError(
                f"cassette {self.path!r}: {len(self.turns) - len(self.requests)} recorded turn(s) never replayed"
            )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Replay the next recorded turn after checking the request matches the recording."""
        n = len(self.requests)
        self.requests.append(snapshot(request))
        if n >= len(self.turns):
            raise CassetteDriftError(
                f"cassette {self.path!r} has {len(self.turns)} turns; request #{n + 1} was not recorded"
            )
        turn = self.turns[n]
        got, want = request_key(request), _portable(turn["request"])
        if got != want:
            raise CassetteDriftError(
                f"cassette {self.path!r}: request #{n + 1} drifted from the recording ({_first_difference(want, got)}); record it again if the change is intended"
            )
        for d in turn["events"]:
            yield _event_from_dict(d)
        if "error" in turn:
            raise error_from_dict(turn["error"])


def _first_difference(want: dict[str, Any], got: dict[str, Any]) -> str:
    for key in ("purpose", "system", "tools"):
        if want[key] != got[key]:
            return f"`{key}` differs"
    for i, (a, b) in enumerate(zip(want["messages"], got["messages"])):
        if a != b:
            return f"message {i + 1} differs: recorded {a!r}, now {b!r}"
    return f"recorded {len(want['messages'])} messages, now {len(got['messages'])}"
