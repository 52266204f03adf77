"""The chat widget's wire: the synced blocks' shapes (TypedDicts) and the fold's parts as them.

The same shapes are declared as JSDoc `@typedef`s at the top of `static/chat.js`; keep the two
in step. Everything here is plain JSON (the widget syncs it to the browser and into saved
notebooks), so values are clipped (`RESULT_CHARS`) and images are referenced by digest (their
bytes travel in the widget's `images` trait).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal, TypedDict

from flue_nb.notebook.view.cards import card_for
from flue_nb.notebook.view.fold import input_text
from flue_nb.notebook.view.parts import (
    Block,
    Clip,
    CompactionPart,
    ImageRef,
    NotePart,
    Part,
    SignalPart,
    TaskPart,
    TextPart,
    ToolPart,
    UserPart,
    clip,
)

__all__ = ["BlockJSON", "CodeJSON", "PartJSON", "StatusJSON", "ToolJSON", "block_json"]


class ClipJSON(TypedDict):
    """The start of a long value and its full size."""

    text: str
    bytes: int
    lines: int
    clipped: bool


class CodeJSON(TypedDict):
    """An argument drawn as code."""

    arg: str
    lang: str
    value: ClipJSON


class ImageJSON(TypedDict):
    """An image reference; its data URL is `images[digest]` in the widget's `images` trait."""

    digest: str
    media_type: str
    width: int
    height: int
    label: str


class TaskJSON(TypedDict):
    """A subagent's run."""

    kind: Literal["task"]
    agent: str
    description: str
    depth: int
    status: str
    text: str | None
    error: str | None
    parts: list[PartJSON]


class ToolJSON(TypedDict):
    """A tool card."""

    kind: Literal["tool"]
    call_id: str
    name: str
    summary: str
    status: str
    duration_ms: float | None
    input: ClipJSON
    """The arguments that are not code, as JSON."""
    code: list[CodeJSON]
    result: ClipJSON | None
    result_kind: str
    result_lang: str
    namespace: dict[str, list[str]] | None
    approval: dict[str, Any] | None
    ask: str | None
    asked_at: float | None
    progress: str
    images: list[ImageJSON]
    task: TaskJSON | None


class TextJSON(TypedDict):
    """Answer text or thinking (`kind`)."""

    kind: Literal["text", "thinking"]
    text: str


class OtherJSON(TypedDict, total=False):
    """Signal chips, compaction dividers, notes and joined messages: their dataclass fields."""

    kind: str


UserJSON = TypedDict("UserJSON", {"kind": Literal["user"], "text": str, "from": str})
"""A message that joined this response (`from`: the submission it was admitted as)."""

PartJSON = TextJSON | ToolJSON | TaskJSON | UserJSON | OtherJSON


class BlockJSON(TypedDict):
    """One submission (or an `aside` between them) as the widget draws it."""

    id: str
    kind: Literal["submission", "aside"]
    text: str
    state: str
    outcome: str | None
    error: dict[str, str] | None
    recovered: bool
    joined_into: str | None
    result: str | None
    attempt: int
    parts: list[PartJSON]


class StatusJSON(TypedDict):
    """The gauge and the queue (the widget's `status` trait)."""

    agent: str
    model: str
    used_tokens: int | None
    context_window: int | None
    threshold: int | None
    queued: int
    running: bool
    usage: dict[str, int]
    cost: str
    cost_note: str
    cache_share: float | None
    """Share of prompt tokens read from the provider's cache (None before any prompt)."""


def _clip(value: Clip) -> ClipJSON:
    return {"text": value.text, "bytes": value.bytes, "lines": value.lines, "clipped": value.clipped}


def _lang(lang: str, data: dict[str, Any]) -> str:
    if lang:
        return lang
    path = data.get("path")
    return path.rsplit(".", 1)[-1].lower() if isinstance(path, str) and "." in path else ""


def _image(i: ImageRef) -> ImageJSON:
    return {"digest": i.digest, "media_type": i.media_type, "width": i.width, "height": i.height, "label": i.label}


def _tool(t: ToolPart) -> ToolJSON:
    card = card_for(t.name)
    code_args = {k: v for k, v in card.code.items() if isinstance(t.input.get(k), str)}
    rest = {k: v for k, v in t.input.items() if k not in code_args}
    return {
        "kind": "tool", "call_id": t.call_id, "name": t.name, "summary": t.summary,
        "status": t.status, "duration_ms": t.duration_ms,
        "input": _clip(clip(input_text(rest) if rest else "")),
        "code": [{"arg": k, "lang": _lang(v, t.input), "value": _clip(clip(t.input[k]))} for k, v in code_args.items()],
        "result": _clip(clip(t.result)) if t.result is not None else None,
        "result_kind": card.result if not t.is_error else "text",
        "result_lang": _lang(card.result_lang, t.input) if card.result == "code" else "",
        "namespace": asdict(t.namespace) if t.namespace is not None else None,
        "approval": t.approval, "ask": t.ask, "asked_at": t.asked_at, "progress": t.progress,
        "images": [_image(i) for i in t.images],
        "task": _task(t.task) if t.task is not None else None,
    }  # fmt: skip


def _task(t: TaskPart) -> TaskJSON:
    return {
        "kind": "task", "agent": t.agent, "description": t.description, "depth": t.depth,
        "status": t.status, "text": t.text, "error": t.error, "parts": parts_json(t.parts),
    }  # fmt: skip


def _part(p: Part) -> PartJSON:
    if isinstance(p, TextPart):
        return {"kind": p.kind, "text": p.text}
    if isinstance(p, ToolPart):
        return _tool(p)
    if isinstance(p, TaskPart):
        return _task(p)
    if isinstance(p, UserPart):
        return {"kind": "user", "text": p.text, "from": p.origin}
    assert isinstance(p, (SignalPart, CompactionPart, NotePart))
    out: OtherJSON = asdict(p)  # type: ignore[assignment]
    return out


def parts_json(parts: list[Part]) -> list[PartJSON]:
    """Parts as the JSON the front end draws."""
    return [_part(p) for p in parts]


def block_json(b: Block) -> BlockJSON:
    """A block as the JSON the front end draws."""
    return {
        "id": b.id, "kind": b.kind, "text": b.text, "state": b.state, "outcome": b.outcome,
        "error": b.error, "recovered": b.recovered, "joined_into": b.joined_into,
        "result": b.result, "attempt": b.attempt, "parts": parts_json(b.parts),
    }  # fmt: skip
