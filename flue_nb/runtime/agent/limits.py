"""An agent's or a submission's spending limits: dollars at list prices, or tokens."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.errors import ConfigError

__all__ = ["BUDGET_KEYS", "Limits", "check_limits"]

BUDGET_KEYS = ("max_cost_usd", "max_input_tokens", "max_output_tokens")
"""The per-submission settings a budget is made of (stored with the submission, like max_turns)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """A submission's spending limits; None is no limit."""

    max_cost_usd: float | None = None
    """Dollars at list prices (`PRICES_AS_OF`), its subagents' responses included."""
    max_input_tokens: int | None = None
    """Prompt tokens (fresh, cache reads and cache writes) over all its model calls."""
    max_output_tokens: int | None = None
    """Output tokens over all its model calls."""

    @classmethod
    def of(cls, settings: Mapping[str, Any] | None, default: Limits | None = None) -> Limits:
        """The limits in a submission's stored settings, each falling back to `default`'s."""
        base = default or cls()
        s = settings or {}
        return cls(
            s.get("max_cost_usd", base.max_cost_usd),
            s.get("max_input_tokens", base.max_input_tokens),
            s.get("max_output_tokens", base.max_output_tokens),
        )

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.max_cost_usd, self.max_input_tokens, self.max_output_tokens))


def check_limits(
    *, max_cost_usd: object = None, max_input_tokens: object = None, max_output_tokens: object = None
) -> dict[str, Any]:
    """The limits that were given, validated, as settings to store; `ConfigError` otherwise."""
    out: dict[str, Any] = {}
    if max_cost_usd is not None:
        ok = isinstance(max_cost_usd, (int, float)) and not isinstance(max_cost_usd, bool)
        if not ok or not math.isfinite(float(max_cost_usd)) or float(max_cost_usd) <= 0:  # type: ignore[arg-type]
            raise ConfigError(f"max_cost_usd must be a positive number of dollars, got {max_cost_usd!r}")
        out["max_cost_usd"] = float(max_cost_usd)  # type: ignore[arg-type]
    for name, value in (("max_input_tokens", max_input_tokens), ("max_output_tokens", max_output_tokens)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive int (tokens), got {value!r}")
        out[name] = value
    return out
