"""Context window and output limits of known Anthropic model ids.

The runtime budgets compaction from these numbers (contract 13.1), so a wrong guess only moves
the compaction threshold; overflow recovery (contract 13.5) still catches a window we overrate.
Dated ids (`claude-sonnet-4-5-20250929`) and `-latest` aliases match their family by prefix.
"""

from __future__ import annotations

from flue_nb.runtime.providers.model import ModelInfo

__all__ = ["DEFAULT_CONTEXT_WINDOW", "DEFAULT_MAX_OUTPUT_TOKENS", "model_info"]

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

_BY_LENGTH = sorted(_TABLE, key=lambda row: len(row[0]), reverse=True)


def _matches(model_id: str, prefix: str) -> bool:
    # A prefix must end at a `-` boundary: "claude-opus-4-1" must not claim "claude-opus-4-10".
    return model_id == prefix or model_id.startswith(prefix + "-")


def model_info(model_id: str) -> ModelInfo:
    """Limits of `model_id`, falling back to 200,000 / 32,000 for ids the table lacks."""
    key = model_id.strip().lower()
    for prefix, window, max_out in _BY_LENGTH:
        if _matches(key, prefix):
            return ModelInfo(id=model_id, context_window=window, max_output_tokens=max_out)
    return ModelInfo(
        id=model_id,
        context_window=DEFAULT_CONTEXT_WINDOW,
        max_output_tokens=DEFAULT_MAX_OUTPUT_TOKENS,
    )
