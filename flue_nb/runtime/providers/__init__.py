"""Model providers, and `resolve_model`, which turns a model spec into a `Model`.

Importing this package must stay cheap: `import anthropic` costs over a second, so the
Anthropic provider module is imported only when a spec names it.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.messages import Usage
from flue_nb.runtime.providers.model import Model, Price

__all__ = ["ALLOW_MODEL_REQUESTS_ENV", "Spend", "check_model_request", "price_of", "resolve_model"]

ALLOW_MODEL_REQUESTS_ENV = "FLUE_ALLOW_MODEL_REQUESTS"
"""Set to `0` (the test suite does) and providers refuse any host but loopback, so no test can
reach a paid API; unset or any other value allows requests."""

_ACCEPTED = "`'anthropic/<model-id>'` (e.g. `'anthropic/claude-sonnet-4-6'`) or a `Model` instance"


def resolve_model(spec: str | Model, **kwargs: Any) -> Model:
    """Turn `'anthropic/<model-id>'` into an `AnthropicModel`; pass a `Model` through unchanged.

    Keyword arguments go to the provider's constructor (`api_key`, `base_url`, `max_tokens`, ...).
    Raises `ConfigError` for any other spec.
    """
    if isinstance(spec, str):
        provider, sep, model_id = spec.strip().partition("/")
        if sep and provider.lower() == "anthropic" and model_id.strip():
            from flue_nb.runtime.providers.anthropic import AnthropicModel

            return AnthropicModel(model_id.strip(), **kwargs)
        hint = ""
        if not sep and spec.strip().lower().startswith("claude"):
            hint = f" Did you mean `'anthropic/{spec.strip()}'`?"
        raise ConfigError(f"Unknown model spec {spec!r}; expected {_ACCEPTED}.{hint}", spec=spec)
    if isinstance(spec, Model):
        if kwargs:
            # Silently dropping them would hide a typo'd setup; an instance is already configured.
            raise ConfigError(
                f"Options {sorted(kwargs)!r} apply only to a model spec string, not to a `Model` instance."
            )
        return spec
    raise ConfigError(f"Cannot use {spec!r} as a model; expected {_ACCEPTED}.", spec=repr(spec))


def price_of(model_id: str) -> Price | None:
    """The list prices of `model_id` when flue_nb knows them (see `model.PRICES_AS_OF`), else None."""
    from flue_nb.runtime.providers._catalog import model_info

    return model_info(model_id).price


@dataclass
class Spend:
    """What responses cost at list prices, and how many came from models without a known price."""

    usd: float | None = None
    """None until a response of a priced model is added."""
    unpriced: int = 0

    def add(self, model_id: str | None, usage: Usage) -> None:
        """Count one response of `model_id` that used `usage`."""
        price = price_of(model_id) if model_id else None
        if price is None:
            self.unpriced += 1
        else:
            self.usd = (self.usd or 0.0) + price.cost(usage)


def check_model_request(host: str, *, provider: str) -> None:
    """Raise `ConfigError` when model requests are turned off and `host` is not loopback."""
    if os.environ.get(ALLOW_MODEL_REQUESTS_ENV, "").strip().lower() not in ("0", "false", "no"):
        return
    if _is_loopback(host):
        return
    raise ConfigError(
        f"Model requests are turned off (`{ALLOW_MODEL_REQUESTS_ENV}=0`) and {provider} host "
        f"{host!r} is not loopback. Use `flue_nb.models.ScriptedModel` or a loopback server in "
        f"tests, or unset `{ALLOW_MODEL_REQUESTS_ENV}` to allow real requests.",
        host=host,
    )


def _is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
