"""Context window, output limits and list prices of known Anthropic model ids.

The runtime budgets compaction from the limits (contract 13.1), so a wrong guess only moves
the compaction threshold; overflow recovery (contract 13.5) still catches a window we overrate.
The prices make the cost estimates of a cell and of `%flue status`: list prices of the day in
`PRICES_AS_OF`, so an estimate, never a bill (discounts, batch, regional and fast-mode pricing
are not modelled). Dated ids (`claude-sonnet-4-5-20250929`) and `-latest` aliases match their
family by prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flue_nb.runtime.providers.model import PRICES_AS_OF, ModelInfo, Price

__all__ = ["DEFAULT_CONTEXT_WINDOW", "DEFAULT_MAX_OUTPUT_TOKENS", "PRICES_AS_OF", "model_info"]

DEFAULT_CONTEXT_WINDOW = 200_000
"""Window assumed for an id the table does not know (every Claude model has at least this)."""

DEFAULT_MAX_OUTPUT_TOKENS = 32_000
"""Output limit assumed for an unknown id."""

# (prefix, context window, max output tokens). Longest prefix wins, so a point release listed
# here beats its family row below it ("claude-opus-4-1" before "claude-opus-4").
# Checked against platform.claude.com's model pages on 2026-11-30.
_TABLE: tuple[tuple[str, int, int], ...] = (
    # Claude 5.x: every family so far has 1M / 128K ("claude-sonnet-5" covers 5 and 5.5)
    ("claude-fable-5", 1_000_000, 128_000),
    ("claude-mythos-5", 1_000_000, 128_000),
    ("claude-opus-5", 1_000_000, 128_000),
    ("claude-sonnet-5", 1_000_000, 128_000),
    ("claude-haiku-5", 1_000_000, 128_000),
    # Claude 4.x
    ("claude-opus-4-8", 1_000_000, 128_000),
    ("claude-opus-4-7", 1_000_000, 128_000),
    ("claude-opus-4-6", 1_000_000, 128_000),
    ("claude-opus-4-5", 200_000, 64_000),
    ("claude-opus-4-1", 200_000, 32_000),
    ("claude-opus-4", 200_000, 32_000),
    ("claude-sonnet-4-6", 1_000_000, 64_000),
    ("claude-sonnet-4-5", 200_000, 64_000),
    ("claude-sonnet-4", 200_000, 64_000),
    ("claude-haiku-4-5", 200_000, 64_000),
    ("claude-haiku-4", 200_000, 64_000),
    # Claude 3.x (old naming: family after the version)
    ("claude-3-7-sonnet", 200_000, 64_000),
    ("claude-3-5-sonnet", 200_000, 8_192),
    ("claude-3-5-haiku", 200_000, 8_192),
    ("claude-3-opus", 200_000, 4_096),
    ("claude-3-sonnet", 200_000, 4_096),
    ("claude-3-haiku", 200_000, 4_096),
)


def _price(inp: float, out: float, read: float, *, long_prompt: tuple[int, Price] | None = None) -> Price:
    # A 5-minute cache write costs 1.25x the input rate on every model.
    return Price(inp, out, inp * 1.25, read, long_prompt)


# (prefix, price), USD per million tokens; longest prefix wins as above. Models not listed get
# no price (their cost is shown as unknown rather than guessed).
_PRICES: tuple[tuple[str, Price], ...] = (
    ("claude-fable-5-1", _price(10, 50, 0.25)),
    ("claude-mythos-5-1", _price(10, 50, 0.25)),
    ("claude-fable-5", _price(10, 50, 1.00)),
    ("claude-mythos-5", _price(10, 50, 1.00)),
    ("claude-opus-5-5", _price(4, 20, 0.20)),
    ("claude-opus-5", _price(5, 25, 0.50)),
    ("claude-sonnet-5-5", _price(2, 10, 0.10)),
    ("claude-sonnet-5", _price(2, 10, 0.20)),
    ("claude-haiku-5-5", _price(0.10, 0.50, 0.01, long_prompt=(100_000, _price(0.50, 2.50, 0.05)))),
    ("claude-opus-4-8", _price(5, 25, 0.50)),
    ("claude-opus-4-7", _price(5, 25, 0.50)),
    ("claude-opus-4-6", _price(5, 25, 0.50)),
    ("claude-opus-4-5", _price(5, 25, 0.50)),
    ("claude-opus-4-1", _price(15, 75, 1.50)),
    ("claude-opus-4", _price(15, 75, 1.50)),
    ("claude-sonnet-4", _price(3, 15, 0.30)),
    ("claude-haiku-4-5", _price(1, 5, 0.10)),
    ("claude-3-7-sonnet", _price(3, 15, 0.30)),
    ("claude-3-5-sonnet", _price(3, 15, 0.30)),
    ("claude-3-5-haiku", _price(0.80, 4, 0.08)),
    ("claude-3-opus", _price(15, 75, 1.50)),
    ("claude-3-haiku", _price(0.25, 1.25, 0.03)),
)


def _matches(model_id: str, prefix: str) -> bool:
    # A prefix must end at a `-` boundary: "claude-opus-4-1" must not claim "claude-opus-4-10".
    return model_id == prefix or model_id.startswith(prefix + "-")


def _longest_match(rows: Sequence[tuple[Any, ...]], model_id: str) -> Any:
    key = model_id.strip().lower()
    best = max((row for row in rows if _matches(key, row[0])), key=lambda row: len(row[0]), default=None)
    return best[1:] if best is not None else None


def model_info(model_id: str) -> ModelInfo:
    """Limits (200,000 / 32,000 for ids the table lacks) and, when known, list prices of `model_id`."""
    limits = _longest_match(_TABLE, model_id) or (DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT_TOKENS)
    price = _longest_match(_PRICES, model_id)
    return ModelInfo(
        id=model_id, context_window=limits[0], max_output_tokens=limits[1], price=price[0] if price else None
    )
