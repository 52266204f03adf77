"""What an agent's `use_model(compaction=...)` asks of compaction: `CompactionConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.providers.model import Model

__all__ = ["DEFAULT_KEEP_RECENT_TOKENS", "CompactionConfig"]

DEFAULT_KEEP_RECENT_TOKENS = 8_000
"""Tokens of recent history kept verbatim (contract 13.2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionConfig:
    """How to compact (contract 13.4); unknown keywords are a `TypeError` by construction."""

    reserve_tokens: int | None = None
    """Tokens kept free for the next response; None means min(20,000, max output tokens)."""
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS
    """Tokens of recent history kept verbatim."""
    model: str | Model | None = None
    """The summarisation model: a spec such as `"anthropic/claude-haiku-4-5"`, a model, or None
    for the conversation's own model."""

    def __post_init__(self) -> None:
        if self.reserve_tokens is not None:
            _check_positive("reserve_tokens", self.reserve_tokens)
        _check_positive("keep_recent_tokens", self.keep_recent_tokens)
        m = self.model
        if isinstance(m, str):
            if not m.strip():
                raise ConfigError("CompactionConfig: `model` is an empty string; give a model spec or None.")
        elif m is not None and not isinstance(m, Model):
            raise ConfigError(f"CompactionConfig: `model` must be a model spec string, a model or None, not {m!r}.")


def _check_positive(name: str, value: Any) -> None:
    # bool is an int subclass, and `keep_recent_tokens=True` is a mistake, not 1 token.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"CompactionConfig: `{name}` must be a positive int, not {value!r}.")
    if value <= 0:
        raise ConfigError(f"CompactionConfig: `{name}` must be positive, not {value!r}.")
