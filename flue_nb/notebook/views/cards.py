"""How a tool's card is drawn: which arguments are code, and what kind of value its result is.

A tool gets a proper card with one line: `register_card("run_cell", code={"source": "python"})`.
Unregistered tools get the default card (arguments as JSON, result as text). The JSON renderer
(`chat.wire`) reads the registry; the front end draws `code` as highlighted code and a `list`
result as a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Card", "ResultKind", "card_for", "register_card"]

ResultKind = Literal["text", "code", "list", "markdown"]
"""`text`: preformatted; `code`: highlighted as `result_lang`; `list`: one item a line;
`markdown`: rendered (sanitised) like an answer."""


@dataclass(frozen=True, slots=True)
class Card:
    """What a tool's card shows as code and how it draws the result."""

    code: Mapping[str, str] = field(default_factory=dict)
    """Argument name → language (`python`, `bash`; "" guesses from a `path` argument's suffix)."""
    result: ResultKind = "text"
    result_lang: str = ""
    """The result's language when `result` is `code` ("" guesses from `path`)."""


_CARDS: dict[str, Card] = {
    "python": Card(code={"code": "python"}),
    "bash": Card(code={"command": "bash"}),
    "write": Card(code={"content": ""}),
    "edit": Card(code={"old_text": "", "new_text": ""}),
    "glob": Card(result="list"),
    "task": Card(code={"prompt": "markdown"}, result="markdown"),
    # The notebook tools: a cell's source is code; `cells` lists one cell a line.
    "cells": Card(result="list"),
    "insert_cell": Card(code={"source": "python"}),
    "edit_cell": Card(code={"source": "python"}),
    "run_cell": Card(code={"source": "python"}),
}
_DEFAULT = Card()


def register_card(
    tool_name: str,
    *,
    code: Mapping[str, str] | None = None,
    result: ResultKind = "text",
    result_lang: str = "",
) -> None:
    """Say how cards of tool `tool_name` are drawn (code arguments, the result's kind)."""
    _CARDS[tool_name] = Card(dict(code or {}), result, result_lang)


def card_for(tool_name: str) -> Card:
    """The card registered for `tool_name`, or the default one."""
    return _CARDS.get(tool_name, _DEFAULT)
