"""What an MCP tool call sends and gets back: input checked against the server's schema, and a
`CallToolResult` turned into an ordinary tool result (text, and images the model can see)."""

from __future__ import annotations

import base64
import json
from typing import Any

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.images import image_from_bytes
from flue_nb.runtime.messages import ImagePart
from flue_nb.runtime.tools.tool import ToolOutput

__all__ = ["to_output", "validate"]

_TEXT_MIMES = frozenset({"application/json", "application/xml", "application/yaml", "application/x-yaml"})


def validate(schema: dict[str, Any], arguments: dict[str, Any], name: str) -> str | None:
    """Check the input against the server's schema (contract 1.6): None, or what is wrong."""
    try:
        from jsonschema.exceptions import SchemaError
        from jsonschema.validators import validator_for
    except ImportError:  # pragma: no cover - jsonschema comes with the mcp SDK
        return None
    try:
        validator = validator_for(schema)(schema)
        errors = sorted(validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path])
    except SchemaError:
        return None  # the server's schema is broken; let the server judge the input
    if not errors:
        return None
    lines = [f"Invalid input for tool `{name}`:"]
    for err in errors:
        loc = ".".join(str(p) for p in err.path) or "(input)"
        lines.append(f"- field `{loc}`: {err.message}")
    lines.append("Fix the input and call the tool again.")
    return "\n".join(lines)


def to_output(result: Any, server: str, remote: str) -> ToolOutput:
    """A `CallToolResult` as an ordinary tool result: text and images for the model.

    Each image becomes an image block of the result (scaled to the model's limits, stored once by
    digest), with a line in the text that names it; one the model cannot take (SVG, say) is
    only named.
    """
    texts: list[str] = []
    images: list[ImagePart] = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind == "image":
            line = f"[image {len(images) + 1}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
            try:
                images.append(image_from_bytes(base64.b64decode(block.data), label=f"{server} image {len(images) + 1}"))
            except (ConfigError, ValueError) as exc:
                line = f"[image: {block.mime_type}, not shown: {exc}]"
            texts.append(line)
        elif kind == "audio":
            texts.append(f"[audio: {block.mime_type}, not shown]")
        elif kind == "resource":
            texts.append(_resource(block.resource))
        elif kind == "resource_link":
            texts.append(
                f"[resource link: {block.uri}" + (f" — {block.description}" if block.description else "") + "]"
            )
        else:
            texts.append(f"[{kind} content, not shown]")
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, default=str))
    details: dict[str, Any] = {"mcp": {"server": server, "tool": remote}}
    return ToolOutput("\n".join(texts), is_error=bool(result.is_error), details=details, images=images)


def _resource(res: Any) -> str:
    """An embedded resource as text: its text, a text blob decoded, else a line naming it."""
    text = getattr(res, "text", None)
    if text is not None:
        return str(text)
    mime = getattr(res, "mime_type", None) or "binary"
    # A blob of a text type is text sent base64 (server-everything's own "Blob" resources).
    if mime.startswith("text/") or mime in _TEXT_MIMES:
        try:
            return base64.b64decode(getattr(res, "blob", "") or "", validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            pass
    return f"[resource {res.uri}: {mime}, not shown]"
