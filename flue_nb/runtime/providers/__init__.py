"""Model providers, and `resolve_model`, which turns a model spec into a `Model`.

Importing this package must stay cheap: `import anthropic` costs over a second, so the
Anthropic provider module is imported only when a spec names it.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..model import Model

__all__ = ["resolve_model"]

_ACCEPTED = "`'anthropic/<model-id>'` (e.g. `'anthropic/claude-sonnet-4-6'`) or a `Model` instance"


def resolve_model(spec: str | Model, **kwargs: Any) -> Model:
    """Turn `'anthropic/<model-id>'` into an `AnthropicModel`; pass a `Model` through unchanged.

    Keyword arguments go to the provider's constructor (`api_key`, `base_url`, `max_tokens`, ...).
    Raises `ConfigError` for any other spec.
    """
    if isinstance(spec, str):
        provider, sep, model_id = spec.strip().partition("/")
        if sep and provider.lower() == "anthropic" and model_id.strip():
            from .anthropic import AnthropicModel

            return AnthropicModel(model_id.strip(), **kwargs)
        hint = ""
        if not sep and spec.strip().lower().startswith("claude"):
            hint = f" Did you mean `'anthropic/{spec.strip()}'`?"
        raise ConfigError(f"Unknown model spec {spec!r}; expected {_ACCEPTED}.{hint}", spec=spec)
    if isinstance(spec, Model):
        if kwargs:
            # Silently dropping them would hide a typo'd setup; an instance is already configured.
            raise ConfigError(
                f"Options {sorted(kwargs)!r} apply only to a model spec string, "
                "not to a `Model` instance."
            )
        return spec
    raise ConfigError(f"Cannot use {spec!r} as a model; expected {_ACCEPTED}.", spec=repr(spec))
