"""Text that is not valid UTF-8: the one policy for everything entering the store or the prompt.

Python strings can hold what UTF-8 cannot: lone surrogates. They arrive from file names that are
not UTF-8 (`os.fsdecode` maps each bad byte to U+DC80..U+DCFF, "surrogateescape"), from JSON
that spells a lone `\\ud800`, or from any user string. SQLite, the JSON columns, the provider's
wire and the notebook's comm all refuse them, so one such character used to fail a whole run.

The policy is **escape at the boundary, reversibly for file names**:

- a surrogate-escaped byte (U+DC80..U+DCFF) becomes the four characters `\\xNN` (`NN` the byte
  in lower-case hex): bash reads `$'\\xNN'` back as that byte, and the file tools accept the
  escaped name back (`unescape_name`);
- any other lone surrogate becomes `\\uXXXX`;
- a well-formed surrogate pair becomes the character it encodes.

Everything else passes unchanged, so valid text costs one regex scan. Non-finite floats (`NaN`,
`Infinity`, what `1e999` parses to) are not JSON either: `finite_json` tells them apart so tool
input holding one can be refused as invalid (contract 1.6) instead of failing the store.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flue_nb.runtime.messages import AssistantMessage

__all__ = [
    "INVALID_INPUT_KEY",
    "clean",
    "clean_response",
    "clean_value",
    "decode",
    "first_non_finite",
    "to_json",
    "unescape_name",
]

INVALID_INPUT_KEY = "__invalid_json__"
"""Holds a tool call's raw input when it is not valid JSON (cut by `max_tokens`, or holding
`NaN`/`Infinity`), so tool validation tells the model what went wrong instead of the whole
response failing."""

_SURROGATES = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")
_ESCAPED_BYTE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")


def _escape(m: re.Match[str]) -> str:
    s = m.group()
    if len(s) == 2:  # a pair: the character it stands for
        return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    code = ord(s)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def clean(text: str) -> str:
    """`text` with every lone surrogate escaped (see the module docstring); always encodable."""
    if text.isascii() or _SURROGATES.search(text) is None:
        return text
    return _SURROGATES.sub(_escape, text)


def decode(data: bytes) -> str:
    """Bytes from outside (a command's output, a file name) as text; bad bytes become `\\xNN`."""
    return clean(data.decode("utf-8", "surrogateescape"))


def unescape_name(name: str) -> str:
    """The file name `clean` escaped, back: each `\\xNN` (NN ≥ 80) as its surrogate-escaped byte."""
    if "\\x" not in name:
        return name
    return _ESCAPED_BYTE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), name)


def clean_value(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, strings, numbers) with every string `clean`ed.

    Returns the same object when nothing needed cleaning, so the common case allocates nothing.
    """
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        changed = False
        for k, v in value.items():
            k2 = clean(k) if isinstance(k, str) else k
            v2 = clean_value(v)
            changed = changed or k2 is not k or v2 is not v
            out[k2] = v2
        return out if changed else value
    if isinstance(value, (list, tuple)):
        items = [clean_value(v) for v in value]
        if all(a is b for a, b in zip(value, items)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


def first_non_finite(value: Any, path: str = "") -> str | None:
    """The location (`a.b.0`) of the first NaN or infinite float in `value`, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "(input)")
    if isinstance(value, dict):
        for k, v in value.items():
            if (where := first_non_finite(v, f"{path}.{k}" if path else str(k))) is not None:
                return where
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if (where := first_non_finite(v, f"{path}.{i}" if path else str(i))) is not None:
                return where
    return None


def _json_escape(m: re.Match[str]) -> str:
    # The escaped form, as it reads inside a JSON string literal (its backslash doubled).
    return json.dumps(_escape(m), ensure_ascii=False)[1:-1]


def to_json(value: Any) -> str:
    """Strict, compact JSON text of `value` that always encodes as UTF-8.

    Lone surrogates in any string (keys included) are stored escaped, as `clean` would write
    them. Raises `ValueError` for NaN/Infinity (not JSON) and `TypeError` for non-JSON types:
    the store turns both into a `StoreError` naming what it was storing.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if text.isascii() or _SURROGATES.search(text) is None:
        return text
    # A surrogate can only sit inside a string literal, where its escaped form is exact.
    return _SURROGATES.sub(_json_escape, text)


def clean_response(message: AssistantMessage) -> AssistantMessage:
    """A model's response made safe to store and send back, in place (and returned).

    Text, thinking and tool input strings are `clean`ed. Tool input holding NaN or an infinite
    number is replaced by `{INVALID_INPUT_KEY: <its text>}`, so the call comes back to the model
    as invalid input (contract 1.6) and the message still encodes as JSON.
    """
    from flue_nb.runtime.messages import TextPart, ThinkingPart, ToolCall

    for part in message.parts:
        if isinstance(part, TextPart):
            part.text = clean(part.text)
        elif isinstance(part, ThinkingPart):
            part.thinking = clean(part.thinking)
        elif isinstance(part, ToolCall):
            part.id, part.name = clean(part.id), clean(part.name)
            if first_non_finite(part.input) is not None:
                raw = json.dumps(part.input, ensure_ascii=False, default=str)
                part.input = {INVALID_INPUT_KEY: clean(raw)}
            else:
                part.input = clean_value(part.input)
    return message
