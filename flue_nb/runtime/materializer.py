"""Where `Session.materialize` finds the notebook: the notebook layer installs a materializer as
its extension loads (the runtime imports nothing from it). Light: the extension imports this
module at load, before any of the runtime."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MATERIALIZERS", "Materializer", "use_materializer"]

Materializer = Callable[[Any, str, str | None], Any]
"""Writes a conversation's hidden `python` steps into the notebook: (store, conversation id,
submission id or None) -> a result with `text()`."""

MATERIALIZERS: list[Materializer] = []


def use_materializer(materializer: Materializer) -> None:
    """Install what `Session.materialize` calls (the notebook layer does, as its extension loads)."""
    if materializer not in MATERIALIZERS:
        MATERIALIZERS.append(materializer)
