"""Model providers, and `resolve_model`, which turns a model spec into a `Model`.

Importing this package must stay cheap: `import anthropic` costs over a second, so each
provider module is imported only when a spec names it (and the `openai` SDK only at a request).
"""

from __future__ import annotations

import functools
import ipaddress
import os
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.messages import Usage
from flue_nb.runtime.providers.model import Model, Price

__all__ = [
    "ALLOW_MODEL_REQUESTS_ENV",
    "Spend",
    "check_model_request",
    "context_window_of",
    "price_of",
    "resolve_model",
    "split_spec",
]

ALLOW_MODEL_REQUESTS_ENV = "FLUE_ALLOW_MODEL_REQUESTS"
"""Set to `0` (the test suite does) and providers refuse any host but loopback, so no test can
reach a paid API; unset or any other value allows requests."""

_ACCEPTED = (
    "`'anthropic/<model-id>'` (e.g. `'anthropic/claude-sonnet-4-6'`), `'openai/<model>'`, "
    "`'openai-responses/<model>'`, `'azure/<deployment>'`, `'bedrock/<model-id>'`, `'vertex/<model-id>'` "
    "or a `Model` instance"
)
_PROVIDERS = ("anthropic", "openai", "openai-responses", "azure", "bedrock", "vertex")


def resolve_model(spec: str | Model, **kwargs: Any) -> Model:
    """Turn a model spec into its provider's `Model`; pass a `Model` through unchanged.

    `anthropic/<id>` is an `AnthropicModel`; `openai/<model>` an `OpenAIModel` (OpenAI, or the
    server `OPENAI_BASE_URL` names); `openai-responses/<model>` an `OpenAIResponsesModel` (the
    Responses API, same places; no model is sent there unless its spec says so); `azure/<deployment>` an `OpenAIModel` on
    `AZURE_OPENAI_ENDPOINT`; `bedrock/<id>` and `vertex/<id>` Claude through the `anthropic`
    SDK's Bedrock and Vertex clients. `provider:<model>` is the same as `provider/<model>`.
    Keyword arguments go to the provider's constructor. Raises `ConfigError` for any other spec.
    """
    if isinstance(spec, str):
        provider, model_id = split_spec(spec)
        if provider == "anthropic":
            from flue_nb.runtime.providers.anthropic import AnthropicModel

            return AnthropicModel(model_id, **kwargs)
        if provider == "openai":
            from flue_nb.runtime.providers.openai import OpenAIModel

            return OpenAIModel(model_id, **kwargs)
        if provider == "openai-responses":
            from flue_nb.runtime.providers.openai_responses import OpenAIResponsesModel

            return OpenAIResponsesModel(model_id, **kwargs)
        if provider == "azure":
            from flue_nb.runtime.providers.openai import OpenAIModel

            endpoint = kwargs.pop("azure_endpoint", None) or os.environ.get("AZURE_OPENAI_ENDPOINT")
            if not endpoint:
                raise ConfigError(
                    f"`{spec}` needs an Azure OpenAI resource: set `AZURE_OPENAI_ENDPOINT` "
                    "(https://NAME.openai.azure.com) or pass `azure_endpoint=` to `OpenAIModel`.",
                    spec=spec,
                )
            return OpenAIModel(model_id, azure_endpoint=endpoint, **kwargs)
        if provider in ("bedrock", "vertex"):
            from flue_nb.runtime.providers._anthropic_cloud import cloud_model

            return cloud_model(provider, model_id, **kwargs)
        hint = ""
        if not provider and spec.strip().lower().startswith("claude"):
            hint = f" Did you mean `'anthropic/{spec.strip()}'`?"
        elif not provider and spec.strip().lower().startswith(("gpt", "o1", "o3", "o4")):
            hint = f" Did you mean `'openai/{spec.strip()}'`?"
        raise ConfigError(f"Unknown model spec {spec!r}; expected {_ACCEPTED}.{hint}", spec=spec)
    if isinstance(spec, Model):
        if kwargs:
            # Silently dropping them would hide a typo'd setup; an instance is already configured.
            raise ConfigError(
                f"Options {sorted(kwargs)!r} apply only to a model spec string, not to a `Model` instance."
            )
        return spec
    raise ConfigError(f"Cannot use {spec!r} as a model; expected {_ACCEPTED}.", spec=repr(spec))


def split_spec(spec: str) -> tuple[str, str]:
    """`('openai', 'gpt-5')` for `'openai/gpt-5'` or `'openai:gpt-5'`; `('', spec)` for anything else."""
    text = spec.strip()
    # `provider/model` is ours; jupyter-ai spells it `provider:model` (Ollama tags have a `:`
    # too, `openai/llama3.1:8b`, so the first separator decides).
    cut = min((i for i in (text.find("/"), text.find(":")) if i >= 0), default=-1)
    provider, model_id = (text[:cut].strip().lower(), text[cut + 1 :].strip()) if cut >= 0 else ("", text)
    if provider in _PROVIDERS and model_id:
        return provider, model_id
    return "", text


@functools.lru_cache(maxsize=512)
def price_of(model_id: str) -> Price | None:
    """The list prices of `model_id` when flue_nb knows them, else None.

    A bare id is a Claude model at Anthropic's prices (`model.PRICES_AS_OF`); `openai/<id>` is
    priced at OpenAI's (`_openai_limits.OPENAI_PRICES_AS_OF`); any other provider prefix (Azure,
    Bedrock, Vertex, a compatible server's host) has no known price.
    """
    provider, sep, rest = model_id.partition("/")
    if sep:
        if provider == "openai":
            from flue_nb.runtime.providers._openai_limits import openai_price

            return openai_price(rest)
        return None
    from flue_nb.runtime.providers._catalog import model_info

    return model_info(model_id).price


def context_window_of(model_id: str) -> int | None:
    """The context window flue_nb knows for `model_id` (Claude ids, `openai/<id>`,
    `openai-responses/<id>`), else None.

    What a view shows before the model has answered (after, the run's own model info says it).
    """
    provider, sep, rest = model_id.partition("/")
    if sep and provider in ("openai", "openai-responses"):
        from flue_nb.runtime.providers._openai_limits import known

        limits = known(rest)
        return limits.context_window if limits is not None else None
    if sep and provider != "anthropic":
        return None
    from flue_nb.runtime.providers._catalog import model_info

    return model_info(rest if sep else model_id).context_window


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
