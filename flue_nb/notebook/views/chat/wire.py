"""The chat widget's wire, declared once: every synced trait's and every message's shape.

The widget's synced traits (`Traits`), the messages the browser sends (`BrowserMsg`) and the
kernel sends (`KernelMsg`), and the Stop request on the control channel (`StopRequest`,
`StopReply`) are TypedDicts here; `chat._wire_ts` writes them as TypeScript declarations
(`wire.d.ts`), which `chat.js` names in its JSDoc and `tsc` checks it against (a test
checks the file is what the generator writes now, and runs `tsc`). Everything here is plain JSON
(the widget syncs it to the browser and into saved notebooks), so values are clipped
(`RESULT_CHARS`) and images are referenced by digest (their bytes travel in the `images` trait).
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, cast

from flue_nb.notebook.views._notebook_calls import edit_change
from flue_nb.notebook.views.cards import ResultKind, card_for
from flue_nb.notebook.views.changes import PanelItem, headline
from flue_nb.notebook.views.fold import input_text
from flue_nb.notebook.views.parts import (
    Block,
    BlockState,
    Clip,
    ImageRef,
    NotePart,
    Part,
    SignalPart,
    TaskPart,
    TextPart,
    ToolPart,
    ToolStatus,
    UserPart,
    clip,
)
from flue_nb.runtime.effects import Effects
from flue_nb.runtime.facts import ApprovalFacts, ApprovalReason, NamespaceDiff

__all__ = [
    "ApprovalJSON",
    "ApproveMsg",
    "BeatMsg",
    "BlockJSON",
    "BrowserMsg",
    "ChangeItemJSON",
    "ChangesJSON",
    "CodeJSON",
    "KeepMsg",
    "KernelMsg",
    "OlderMsg",
    "OfferJSON",
    "PartJSON",
    "RewindMsg",
    "SendMsg",
    "StatusJSON",
    "StopMsg",
    "StopReply",
    "StopRequest",
    "ToolJSON",
    "Traits",
    "UndoMsg",
    "VendorTraits",
    "block_json",
    "changes_json",
]


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


class NamespaceJSON(TypedDict):
    """The `python` tool's namespace diff."""

    added: list[str]
    changed: list[str]
    removed: list[str]


class _ApprovalRequired(TypedDict):
    reason: ApprovalReason


class ApprovalJSON(_ApprovalRequired, total=False):
    """How an approval was decided (`ApprovalFacts.to_dict()`): unset keys are left out; `by` is
    where it was answered, `detail` why a request `ended`, `rule` the rule that decided."""

    approved: bool
    policy: Literal["allow", "ask", "deny"]
    fallback: Literal["allow", "deny"]
    by: str
    detail: str
    rule: str


class TaskJSON(TypedDict):
    """A subagent's run."""

    kind: Literal["task"]
    agent: str
    description: str
    depth: int
    status: Literal["running", "ok", "error"]
    text: str | None
    error: str | None
    parts: list[PartJSON]


class ToolJSON(TypedDict):
    """A tool card."""

    kind: Literal["tool"]
    call_id: str
    name: str
    summary: str
    status: ToolStatus
    duration_ms: float | None
    input: ClipJSON
    """The arguments that are not code, as JSON."""
    code: list[CodeJSON]
    diff: list[str]
    """An `edit_cell` that landed: the cell's old and new source as unified diff lines (drawn in
    place of its `source`, which is then not in `code`); [] otherwise."""
    result: ClipJSON | None
    result_kind: ResultKind
    result_lang: str
    namespace: NamespaceJSON | None
    approval: ApprovalJSON | None
    ask: str | None
    asked_at: float | None
    always: str | None
    """What "Always allow" would grant (the tool's pattern), when the card offers it."""
    progress: str
    images: list[ImageJSON]
    task: TaskJSON | None
    effects: int
    """How many cells, files and variables the call's record says it changed (Rewind shows)."""


class TextJSON(TypedDict):
    """Answer text or thinking (`kind`)."""

    kind: Literal["text", "thinking"]
    text: str


class SignalJSON(TypedDict):
    """A signal the model was sent, with what changed."""

    signal_type: str
    changes: list[str]
    kind: Literal["signal"]


class CompactionJSON(TypedDict):
    """A compaction: running, folded, skipped or failed."""

    reason: str
    running: bool
    tokens_before: int | None
    tokens_after: int | None
    messages_before: int | None
    messages_after: int | None
    summary: str | None
    skipped: bool
    is_error: bool
    error: str | None
    kind: Literal["compaction"]


class NoteJSON(TypedDict):
    """A line of its own (a retry, a recovery, a hint); `log` for a runtime log line."""

    text: str
    log: bool
    kind: Literal["note"]


UserJSON = TypedDict("UserJSON", {"kind": Literal["user"], "text": str, "from": str})
UserJSON.__doc__ = """A message that joined this response (`from`: the submission it was admitted as)."""

PartJSON = TextJSON | ToolJSON | TaskJSON | SignalJSON | CompactionJSON | NoteJSON | UserJSON


class ErrorJSON(TypedDict):
    """Why a submission failed or was aborted."""

    type: str
    message: str


class BlockJSON(TypedDict):
    """One submission (or an `aside` between them) as the widget draws it."""

    id: str
    kind: Literal["submission", "aside"]
    text: str
    state: BlockState
    outcome: str | None
    error: ErrorJSON | None
    recovered: bool
    joined_into: str | None
    result: str | None
    attempt: int
    parts: list[PartJSON]


class UsageJSON(TypedDict):
    """Token totals of the conversation so far."""

    input: int
    output: int
    cache_read: int
    cache_write: int


class StatusJSON(TypedDict):
    """The gauge and the queue (the widget's `status` trait)."""

    agent: str
    model: str
    used_tokens: int | None
    context_window: int | None
    threshold: int | None
    queued: int
    running: bool
    usage: UsageJSON
    cost: str
    cost_note: str
    cache_share: float | None
    """Share of prompt tokens read from the provider's cache (None before any prompt)."""
    tokens_reported: bool
    """False when the model server reported no token usage for any response (the counts are 0
    for want of figures, not measured)."""


class ChangeItemJSON(TypedDict):
    """One item of a run's changes panel (`views.changes.PanelItem`)."""

    key: str
    ident: str
    step: int
    call_id: str
    tool: str
    kind: Literal["cell", "file", "variable"]
    action: str
    target: str
    title: str
    summary: str
    diff: list[str]
    diff_note: str
    lang: str
    undone: bool
    undoable: bool
    kept: bool
    """The person chose Keep (in this view)."""
    note: str


class OfferJSON(TypedDict):
    """An undo or rewind refused as not exact, offered again with force ("Undo anyway")."""

    what: Literal["undo", "rewind"]
    items: list[str]
    """`STEP.ITEM` keys (undo) or the step's call id (rewind)."""


class ChangesJSON(TypedDict):
    """A settled run's changes panel: its items, and what the last Undo or Rewind said."""

    submission_id: str
    headline: str
    items: list[ChangeItemJSON]
    said: str
    refused: list[str]
    """Why each refused item cannot be undone exactly (`1.2 notes.txt — changed again since`)."""
    offer: OfferJSON | None


class Traits(TypedDict):
    """The chat widget's synced traits (`ChatWidget`; a test checks the two name the same)."""

    mode: Literal["chat", "cell"]
    title: str
    history: list[BlockJSON]
    live: list[BlockJSON]
    status: StatusJSON
    interactive: bool
    sent: dict[str, str]
    error: str
    holding: str
    images: dict[str, str]
    changes: dict[str, ChangesJSON]
    """Submission id → its changes panel (settled runs that changed something)."""
    vendor: str | None
    """The shared `Vendor` model as `IPY_MODEL_<id>` (ipywidgets' widget serialization)."""
    older: int
    """How many submissions came before the oldest one in `history` (the browser asks for them
    a page at a time with `OlderMsg`)."""
    ref: str


class VendorTraits(TypedDict):
    """The shared vendor model's synced trait: module sources by short name, and `katex.css`."""

    sources: dict[str, str]


class SendMsg(TypedDict):
    """The browser sends a new message, with its own id for the acknowledgement in `sent`."""

    type: Literal["send"]
    text: str
    id: str


class StopMsg(TypedDict):
    """The browser's Stop: abort every unsettled submission of the conversation."""

    type: Literal["stop"]


class _ApproveRequired(TypedDict):
    type: Literal["approve"]
    call_id: str
    approved: bool


class ApproveMsg(_ApproveRequired, total=False):
    """The browser's answer to a tool card waiting for approval; `always` with an approval: "always
    allow this for this conversation" (the grant the rules offered for the call, kept in the store)."""

    always: bool


class OlderMsg(TypedDict):
    """The browser asks for the page of submissions before the oldest one drawn (the user
    scrolled to the top of the chat, or clicked to see earlier messages)."""

    type: Literal["older"]


class UndoMsg(TypedDict):
    """Undo items of a run's panel (`all` for every one); `force` after a refusal."""

    type: Literal["undo"]
    submission_id: str
    items: list[str]
    force: bool


class KeepMsg(TypedDict):
    """Keep items of a run's panel (their Undo goes; `all` for every one)."""

    type: Literal["keep"]
    submission_id: str
    items: list[str]


class RewindMsg(TypedDict):
    """Rewind to before a tool call's step (that step's effects and every later one's undone)."""

    type: Literal["rewind"]
    submission_id: str
    call_id: str
    force: bool


BrowserMsg = SendMsg | StopMsg | ApproveMsg | OlderMsg | UndoMsg | KeepMsg | RewindMsg


class BeatMsg(TypedDict):
    """The kernel's heartbeat (`chat._heartbeat`): a view whose beats stop says its kernel is gone."""

    type: Literal["beat"]


KernelMsg = BeatMsg


class StopRequest(TypedDict):
    """`flue_stop_request`'s content on the control channel (`serve._stop`): the call to stop."""

    call_id: str


class _StopReplyBase(TypedDict):
    status: Literal["ok", "error"]
    stopped: bool


class StopReply(_StopReplyBase, total=False):
    """`flue_stop_reply`'s content: whether the call was stopped (`message` says a bad request)."""

    message: str


def _clip(value: Clip) -> ClipJSON:
    return {"text": value.text, "bytes": value.bytes, "lines": value.lines, "clipped": value.clipped}


def _lang(lang: str, data: dict[str, Any]) -> str:
    if lang:
        return lang
    path = data.get("path")
    return path.rsplit(".", 1)[-1].lower() if isinstance(path, str) and "." in path else ""


def _image(i: ImageRef) -> ImageJSON:
    return {"digest": i.digest, "media_type": i.media_type, "width": i.width, "height": i.height, "label": i.label}


def _namespace(n: NamespaceDiff) -> NamespaceJSON:
    # Copies, as everywhere on the wire: a synced value sharing a list the fold changes later
    # would compare equal to its next value and never be sent.
    return {"added": list(n.added), "changed": list(n.changed), "removed": list(n.removed)}


def _approval(facts: ApprovalFacts) -> ApprovalJSON:
    return cast(ApprovalJSON, facts.to_dict())


def _tool(t: ToolPart) -> ToolJSON:
    card = card_for(t.name)
    diff = edit_change(t.name, t.details)
    code_args = {k: v for k, v in card.code.items() if isinstance(t.input.get(k), str)}
    rest = {k: v for k, v in t.input.items() if k not in code_args}
    if diff:  # the diff holds the new source, its changes marked
        code_args.pop("source", None)
    return {
        "kind": "tool", "call_id": t.call_id, "name": t.name, "summary": t.summary,
        "status": t.status, "duration_ms": t.duration_ms,
        "input": _clip(clip(input_text(rest) if rest else "")),
        "code": [{"arg": k, "lang": _lang(v, t.input), "value": _clip(clip(t.input[k]))} for k, v in code_args.items()],
        "diff": diff,
        "result": _clip(clip(t.result)) if t.result is not None else None,
        "result_kind": card.result if not t.is_error else "text",
        "result_lang": _lang(card.result_lang, t.input) if card.result == "code" else "",
        "namespace": _namespace(t.namespace) if t.namespace is not None else None,
        "approval": _approval(t.approval) if t.approval is not None else None, "ask": t.ask, "asked_at": t.asked_at, "always": t.always, "progress": t.progress,
        "images": [_image(i) for i in t.images],
        "task": _task(t.task) if t.task is not None else None,
        "effects": _effects_count(t.details),
    }  # fmt: skip


def _effects_count(details: dict[str, Any] | None) -> int:
    eff = Effects.from_details(details)
    return 0 if eff is None else len(eff.variables) + len(eff.files) + len(eff.cells)


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
    if isinstance(p, SignalPart):
        return {"signal_type": p.signal_type, "changes": list(p.changes), "kind": p.kind}
    if isinstance(p, NotePart):
        return {"text": p.text, "log": p.log, "kind": p.kind}
    return {
        "reason": p.reason, "running": p.running, "tokens_before": p.tokens_before, "tokens_after": p.tokens_after,
        "messages_before": p.messages_before, "messages_after": p.messages_after, "summary": p.summary,
        "skipped": p.skipped, "is_error": p.is_error, "error": p.error, "kind": p.kind,
    }  # fmt: skip


def parts_json(parts: list[Part]) -> list[PartJSON]:
    """Parts as the JSON the front end draws."""
    return [_part(p) for p in parts]


def _error(e: dict[str, str]) -> ErrorJSON:
    return {"type": e["type"], "message": e["message"]}


def block_json(b: Block) -> BlockJSON:
    """A block as the JSON the front end draws."""
    return {
        "id": b.id, "kind": b.kind, "text": b.text, "state": b.state, "outcome": b.outcome,
        "error": _error(b.error) if b.error is not None else None, "recovered": b.recovered, "joined_into": b.joined_into,
        "result": b.result, "attempt": b.attempt, "parts": parts_json(b.parts),
    }  # fmt: skip


def changes_json(
    submission_id: str,
    items: list[PanelItem],
    *,
    kept: set[str],
    said: str = "",
    refused: list[str] | None = None,
    offer: OfferJSON | None = None,
) -> ChangesJSON:
    """A run's panel (`views.changes.panel` items) as the JSON the front end draws."""
    return {
        "submission_id": submission_id, "headline": headline(items),
        "items": [
            {
                "key": i.key, "ident": i.ident, "step": i.step, "call_id": i.call_id, "tool": i.tool, "kind": i.kind,
                "action": i.action, "target": i.target, "title": i.title, "summary": i.summary, "diff": list(i.diff),
                "diff_note": i.diff_note, "lang": i.lang, "undone": i.undone, "undoable": i.undoable,
                "kept": i.ident in kept, "note": i.note,
            }
            for i in items
        ],
        "said": said, "refused": list(refused or []), "offer": offer,
    }  # fmt: skip
