"""What flue_nb knows of Anthropic's models: limits (see test_anthropic) and list prices."""

from __future__ import annotations

import pytest

from flue_nb.runtime.messages import Usage
from flue_nb.runtime.providers import price_of

M = 1_000_000


def test_a_price_charges_each_kind_of_token_at_its_rate() -> None:
    price = price_of("claude-sonnet-4-6")
    assert price is not None
    # $3 in, $15 out, $0.30 cache read, $3.75 for a 5-minute cache write (1.25x input)
    assert price.cost(Usage(M, 0, 0, 0)) == pytest.approx(3.0)
    assert price.cost(Usage(0, M, 0, 0)) == pytest.approx(15.0)
    assert price.cost(Usage(0, 0, M, 0)) == pytest.approx(0.30)
    assert price.cost(Usage(0, 0, 0, M)) == pytest.approx(3.75)
    assert price.cost(Usage(1200, 30, 0, 0)) == pytest.approx((1200 * 3 + 30 * 15) / M)


def test_a_long_prompt_pays_the_higher_band_on_every_token() -> None:
    price = price_of("claude-haiku-5-5")
    assert price is not None
    assert price.cost(Usage(100_000, 1000)) == pytest.approx((100_000 * 0.10 + 1000 * 0.50) / M)
    # Over 100K prompt tokens, counting cache reads: the whole call, output included, at $0.50 / $2.50.
    assert price.cost(Usage(60_000, 1000, 40_001, 0)) == pytest.approx((60_000 * 0.5 + 1000 * 2.5 + 40_001 * 0.05) / M)


def test_dated_ids_are_priced_by_their_family_and_unknown_ones_not_at_all() -> None:
    assert price_of("claude-sonnet-5-5-20261007") == price_of("claude-sonnet-5-5")
    assert price_of("claude-opus-4-1-20250805") == price_of("claude-opus-4")
    assert price_of("claude-opus-4-6") != price_of("claude-opus-4")  # $5 / $25 since Opus 4.5
    for unknown in ("scripted", "some-future-model", "claude-opus-6"):
        assert price_of(unknown) is None, unknown
