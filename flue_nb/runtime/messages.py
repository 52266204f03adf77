"""The conversation's messages: what is stored, what the model is sent, what the widget redraws.

Every message is a dataclass with a `kind` tag and a JSON form (`to_dict` / `message_from_dict`)
that the store keeps verbatim. Providers translate these into their wire format; nothing else
in the runtime knows a provider's shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

from flue_nb.runtime.facts import ApprovalFacts, NamespaceDiff, join_details, split_details

__all__ = [
    "AssistantMessage",
    "AssistantPart",
    "ImagePart",
    "Message",
    "ProviderPart",
    "SignalMessage",
    "SignalType",
    "SummaryMessage",
    "TextPart",
    "ThinkingPart",
    "ToolCall",
    "ToolResultMessage",
    "Usage",
    "UserMessage",
    "image_from_dict",
    "image_to_dict",
    "message_from_dict",
    "message_images",
    "message_to_dict",
]


@dataclass(slots=True)
class Usage:
    """Token usage the provider reported for one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """Of `output_tokens`, those the model spent reasoning unseen (OpenAI reports them; they
    are billed as output). Not added to `total`: `output_tokens` holds them already."""

    @property
    def total(self) -> int:
        """Everything the call occupied in the context window (contract 13.3)."""
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def cache_share(self) -> float | None:
        """Share of prompt tokens read from the provider's cache (None before any prompt)."""
        prompt = self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
        return self.cache_read_tokens / prompt if prompt else None

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass(slots=True)
class TextPart:
    """Text the assistant said."""

    text: str
    kind: Literal["text"] = "text"
    citations: list[dict[str, Any]] | None = None
    """The provider's citations for this text (web search results, documents), verbatim: sent
    back with it, as the provider requires."""


@dataclass(slots=True)
class ThinkingPart:
    """Extended thinking; `signature` must be sent back to the provider unchanged."""

    thinking: str
    signature: str | None = None
    kind: Literal["thinking"] = "thinking"


@dataclass(slots=True)
class ToolCall:
    """A tool call the assistant asked for."""

    id: str
    name: str
    input: dict[str, Any]
    kind: Literal["tool_call"] = "tool_call"
    caller: dict[str, Any] | None = None
    """Who made the call when it was not the model itself (Anthropic's programmatic tool calling:
    code in its container), kept to be sent back as the API gave it."""


@dataclass(slots=True)
class ProviderPart:
    """A content block of one provider's own that flue_nb does not model — redacted thinking,
    server tool use and its results, MCP-connector blocks — kept verbatim and sent back to that
    provider unchanged (other providers never see it)."""

    provider: str
    """Whose block it is (`anthropic`)."""
    block: dict[str, Any]
    """The block as the provider sent it (its wire form, `type` included)."""
    kind: Literal["provider"] = "provider"

    @property
    def block_type(self) -> str:
        """The block's own type (`redacted_thinking`, `server_tool_use`, ...)."""
        return str(self.block.get("type"))


AssistantPart = Union[TextPart, ThinkingPart, ToolCall, ProviderPart]


@dataclass(slots=True)
class ImagePart:
    """An image in a user message or a tool result (a figure, an attachment, a `read` image).

    The JSON form keeps only the reference (`digest`, type, size, label); the bytes live in the
    store's blob table, once per digest, and are loaded back into `data` with the window.
    """

    media_type: str
    """`image/png`, `image/jpeg`, `image/gif` or `image/webp`."""
    digest: str
    """sha256 hex of `data`: the key in the store's blob table and in cassettes."""
    width: int
    height: int
    label: str = ""
    """What the image is, in a few words (`figure 1`, `plot.png`): shown where bytes are not."""
    data: bytes | None = field(default=None, repr=False, compare=False)
    """The encoded image; None when the bytes could not be loaded (the model gets `describe()`)."""
    kind: Literal["image"] = "image"

    def describe(self) -> str:
        """One line standing for the image where its bytes are not sent (compaction, history)."""
        fmt = self.media_type.rsplit("/", 1)[-1].upper()
        name = f"{self.label}, " if self.label else ""
        return f"[image: {name}{self.width}×{self.height} {fmt}, sha256 {self.digest[:12]}]"


@dataclass(slots=True)
class UserMessage:
    """A person's (or a script's) message."""

    text: str
    submission_id: str | None = None
    """The submission that brought it in (None for messages built by hand)."""
    images: list[ImagePart] = field(default_factory=list)
    """Images the person attached (`--attach`, `prompt(..., images=[...])`)."""
    kind: Literal["user"] = "user"


@dataclass(slots=True)
class AssistantMessage:
    """One model response: text, thinking and tool calls, in order."""

    parts: list[AssistantPart] = field(default_factory=list)
    usage: Usage | None = None
    stop_reason: str | None = None
    model: str | None = None
    aborted: bool = False
    """True when the stream was cut off (abort, crash); the parts are what arrived."""
    kind: Literal["assistant"] = "assistant"
    stop_details: dict[str, Any] | None = None
    """What the provider said about why it stopped, verbatim (a refusal's category and
    explanation); None when it said nothing more than `stop_reason`."""
    metadata: dict[str, Any] | None = None
    """What `use_response_finish` hooks returned for this response, merged (stored with it)."""
    priced_as: str | None = None
    """The model the call was made with, when `model` (what the response named: a gateway may
    rename models) has no known price and that one has: its price counts this response."""

    @property
    def text(self) -> str:
        """All text parts joined."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls, in the order the model made them."""
        return [p for p in self.parts if isinstance(p, ToolCall)]


@dataclass(slots=True)
class ToolResultMessage:
    """The result of one tool call, sent back to the model."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    details: dict[str, Any] | None = field(default=None, compare=False)
    """The tool's structured extra for observers (never sent to the model)."""
    duration_ms: float | None = field(default=None, compare=False)
    """How long the call ran (for observers redrawing it)."""
    images: list[ImagePart] = field(default_factory=list)
    """Images sent to the model next to `content` (figures the code drew, an image `read`)."""
    approval: ApprovalFacts | None = field(default=None, compare=False)
    """How the call's approval was decided, when a policy other than `allow` applied."""
    namespace: NamespaceDiff | None = field(default=None, compare=False)
    """The names the call's code added, changed and removed (the `python` tool)."""
    kind: Literal["tool_result"] = "tool_result"


SignalType = Literal["resources", "environment", "interrupted", "info"]


@dataclass(slots=True)
class SignalMessage:
    """A runtime notice to the model, sent as user-role text in a tagged block (contract 12.2)."""

    signal_type: SignalType
    text: str
    changes: list[str] = field(default_factory=list)
    """What changed, one line each (for observers; the model reads `text`)."""
    kind: Literal["signal"] = "signal"

    def render(self) -> str:
        """The exact text the model receives."""
        return f'<signal type="{self.signal_type}">\n{self.text}\n</signal>'


@dataclass(slots=True)
class SummaryMessage:
    """The compaction summary that stands for the folded older messages (contract 13.6)."""

    text: str
    kind: Literal["summary"] = "summary"

    def render(self) -> str:
        """The exact text the model receives."""
        return f"<summary>\nThe conversation so far, compacted:\n{self.text}\n</summary>"


Message = Union[UserMessage, AssistantMessage, ToolResultMessage, SignalMessage, SummaryMessage]


def image_to_dict(p: ImagePart) -> dict[str, Any]:
    """The JSON form of an image: the reference only, never the bytes."""
    d: dict[str, Any] = {
        "kind": "image",
        "media_type": p.media_type,
        "digest": p.digest,
        "width": p.width,
        "height": p.height,
    }
    if p.label:
        d["label"] = p.label
    return d


def image_from_dict(d: dict[str, Any]) -> ImagePart:
    """An image reference from its JSON form (`data` is filled in from the store's blobs)."""
    return ImagePart(d["media_type"], d["digest"], int(d["width"]), int(d["height"]), d.get("label", ""))


def message_images(m: Message) -> list[ImagePart]:
    """The images a message carries (user attachments, tool-result figures), in order."""
    if isinstance(m, (UserMessage, ToolResultMessage)):
        return m.images
    return []


def _part_to_dict(p: AssistantPart) -> dict[str, Any]:
    if isinstance(p, TextPart):
        if p.citations is not None:
            return {"kind": "text", "text": p.text, "citations": p.citations}
        return {"kind": "text", "text": p.text}
    if isinstance(p, ThinkingPart):
        return {"kind": "thinking", "thinking": p.thinking, "signature": p.signature}
    if isinstance(p, ProviderPart):
        return {"kind": "provider", "provider": p.provider, "block": p.block}
    d = {"kind": "tool_call", "id": p.id, "name": p.name, "input": p.input}
    return d if p.caller is None else {**d, "caller": p.caller}


def _part_from_dict(d: dict[str, Any]) -> AssistantPart:
    k = d["kind"]
    if k == "text":
        return TextPart(d["text"], citations=d.get("citations"))
    if k == "thinking":
        return ThinkingPart(d["thinking"], d.get("signature"))
    if k == "provider":
        return ProviderPart(d["provider"], d["block"])
    return ToolCall(d["id"], d["name"], d.get("input") or {}, caller=d.get("caller"))


def message_to_dict(m: Message) -> dict[str, Any]:
    """The JSON form the store keeps."""
    if isinstance(m, AssistantMessage):
        u = m.usage
        out: dict[str, Any] = {
            "kind": "assistant",
            "parts": [_part_to_dict(p) for p in m.parts],
            "usage": None
            if u is None
            else [u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens]
            + ([u.reasoning_tokens] if u.reasoning_tokens else []),
            "stop_reason": m.stop_reason,
            "model": m.model,
            "aborted": m.aborted,
        }
        if m.stop_details is not None:
            out["stop_details"] = m.stop_details
        if m.metadata:
            out["metadata"] = m.metadata
        if m.priced_as:
            out["priced_as"] = m.priced_as
        return out
    if isinstance(m, UserMessage):
        d: dict[str, Any] = {"kind": "user", "text": m.text, "submission_id": m.submission_id}
        if m.images:
            d["images"] = [image_to_dict(p) for p in m.images]
        return d
    if isinstance(m, ToolResultMessage):
        d = {"kind": "tool_result", "call_id": m.call_id, "name": m.name, "content": m.content, "is_error": m.is_error}
        details = join_details(m.details, m.approval, m.namespace)
        if details:
            d["details"] = details
        if m.duration_ms is not None:
            d["duration_ms"] = m.duration_ms
        if m.images:
            d["images"] = [image_to_dict(p) for p in m.images]
        return d
    if isinstance(m, SignalMessage):
        return {"kind": "signal", "signal_type": m.signal_type, "text": m.text, "changes": m.changes}
    return {"kind": "summary", "text": m.text}


def message_from_dict(d: dict[str, Any]) -> Message:
    """Rebuild a message from its JSON form."""
    k = d["kind"]
    if k == "assistant":
        u = d.get("usage")
        return AssistantMessage(
            parts=[_part_from_dict(p) for p in d["parts"]],
            usage=Usage(*u) if u else None,
            stop_reason=d.get("stop_reason"),
            model=d.get("model"),
            aborted=d.get("aborted", False),
            stop_details=d.get("stop_details"),
            metadata=d.get("metadata"),
            priced_as=d.get("priced_as"),
        )
    if k == "user":
        return UserMessage(d["text"], d.get("submission_id"), [image_from_dict(p) for p in d.get("images") or ()])
    if k == "tool_result":
        details, approval, namespace = split_details(d.get("details"))
        return ToolResultMessage(
            d["call_id"],
            d["name"],
            d["content"],
            d.get("is_error", False),
            details,
            d.get("duration_ms"),
            [image_from_dict(p) for p in d.get("images") or ()],
            approval,
            namespace,
        )
    if k == "signal":
        return SignalMessage(d["signal_type"], d["text"], list(d.get("changes") or []))
    if k == "summary":
        return SummaryMessage(d["text"])
    raise ValueError(f"unknown message kind {k!r}")
