"""Window, output cap, image support and list prices of OpenAI-compatible models, and asking a server.

The runtime budgets compaction, overflow recovery and the chat gauge from `ModelInfo`, so a
compatible server's model must not be budgeted as a 200K Claude: known OpenAI ids come from the
table below; any other server is asked where it says (vLLM's `GET /v1/models` `max_model_len`, LM Studio's
`/api/v0/models/<id>`, llama.cpp's `/props`, Ollama's `POST /api/show`); otherwise a conservative default is used and a one-time warning says
how to set the real numbers. Prices are OpenAI's list prices of `OPENAI_PRICES_AS_OF`, applied
only to responses from OpenAI's own API (a local server's `gpt-oss` costs nothing).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

import httpx2

from flue_nb.runtime.providers.model import Price

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "OPENAI_PRICES_AS_OF",
    "Limits",
    "ask_server",
    "known",
    "openai_price",
    "warn_default",
]

OPENAI_PRICES_AS_OF = "2026-06-30"
"""The date of the OpenAI list prices below (standard tier; no batch, flex or priority pricing)."""

DEFAULT_CONTEXT_WINDOW = 8_192
"""Window assumed for a model nothing tells us about: small on purpose (compacting early loses
less than a server silently cutting the prompt, as Ollama does past its window)."""
DEFAULT_MAX_OUTPUT_TOKENS = 2_048

SERVER_DEFAULT_CONTEXT = 4_096
"""What Ollama serves a model with when neither its Modelfile (`num_ctx`) nor the server
(`OLLAMA_CONTEXT_LENGTH`) says otherwise (its documented default below 24 GiB of VRAM), and
what LM Studio loads a model with unless its settings say more."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What a model takes: window, output cap, and whether it reads images (None: not known)."""

    context_window: int
    max_output_tokens: int
    vision: bool | None = None
    source: str = "table"
    """Where the numbers came from: `table`, `server`, `default` (said in the warning)."""


# (prefix, context window, max output tokens, takes images). Longest prefix ending at a `-`
# wins. The window is what a prompt may use (the GPT-5 family takes 400K of which 128K are
# output, so a prompt gets 272K). From OpenAI's model pages as summarised in mid-2026.
_TABLE: tuple[tuple[str, int, int, bool], ...] = (
    ("gpt-5.5", 1_000_000, 128_000, True),
    ("gpt-5.4", 272_000, 128_000, True),
    ("gpt-5.2", 272_000, 128_000, True),
    ("gpt-5.1", 272_000, 128_000, True),
    ("gpt-5", 272_000, 128_000, True),
    ("gpt-4.1", 1_047_576, 32_768, True),
    ("gpt-4o", 128_000, 16_384, True),
    ("gpt-4-turbo", 128_000, 4_096, True),
    ("gpt-4", 8_192, 8_192, False),
    ("gpt-3.5-turbo", 16_385, 4_096, False),
    ("o4-mini", 200_000, 100_000, True),
    ("o3-mini", 200_000, 100_000, False),
    ("o3", 200_000, 100_000, True),
    ("o1", 200_000, 100_000, True),
    ("gpt-oss", 131_072, 32_768, False),
)


def _price(inp: float, cached: float, out: float) -> Price:
    # OpenAI charges nothing extra to write its cache; a cached prompt token costs `cached`.
    return Price(inp, out, inp, cached)


def _no_cache_discount(inp: float, out: float) -> Price:
    # The pro models list no cached-input price: a cached token costs a full one.
    return Price(inp, out, inp, inp)


_PRICES: tuple[tuple[str, Price], ...] = (
    # Responses-only models: the pro variants (priced only where named here: a `-pro` model
    # never takes its base model's price, ten times lower) and the newer codex models.
    ("gpt-5-pro", _no_cache_discount(15.00, 120.00)),
    ("o3-pro", _no_cache_discount(20.00, 80.00)),
    ("o1-pro", _no_cache_discount(150.00, 600.00)),
    ("gpt-5.3-codex", _price(1.75, 0.175, 14.00)),
    ("gpt-5.2", _price(1.75, 0.175, 14.00)),
    ("gpt-5.5", _price(5.00, 0.50, 30.00)),
    ("gpt-5.4-mini", _price(0.75, 0.075, 4.50)),
    ("gpt-5.4-nano", _price(0.20, 0.02, 1.25)),
    ("gpt-5.4", _price(2.50, 0.25, 15.00)),
    ("gpt-5.1", _price(1.25, 0.125, 10.00)),
    ("gpt-5-mini", _price(0.25, 0.025, 2.00)),
    ("gpt-5-nano", _price(0.05, 0.005, 0.40)),
    ("gpt-5", _price(1.25, 0.125, 10.00)),
    ("gpt-4.1-mini", _price(0.40, 0.10, 1.60)),
    ("gpt-4.1-nano", _price(0.10, 0.025, 0.40)),
    ("gpt-4.1", _price(2.00, 0.50, 8.00)),
    ("gpt-4o-mini", _price(0.15, 0.075, 0.60)),
    ("gpt-4o", _price(2.50, 1.25, 10.00)),
    ("o4-mini", _price(1.10, 0.275, 4.40)),
    ("o3-mini", _price(1.10, 0.55, 4.40)),
    ("o3", _price(2.00, 0.50, 8.00)),
)


def _longest(rows: tuple[tuple[Any, ...], ...], model_id: str) -> Any:
    key = model_id.strip().lower()
    hits = [r for r in rows if key == r[0] or key.startswith(r[0] + "-")]
    return max(hits, key=lambda r: len(r[0]), default=None)


def known(model_id: str) -> Limits | None:
    """The table's limits for an OpenAI model id (dated ids match their family), else None."""
    row = _longest(_TABLE, model_id)
    return Limits(row[1], row[2], row[3]) if row is not None else None


_PRO = re.compile(r"-pro(-|$)")


def openai_price(model_id: str) -> Price | None:
    """OpenAI's list price for `model_id` (see `OPENAI_PRICES_AS_OF`), else None."""
    row = _longest(_PRICES, model_id)
    if row is None or (_PRO.search(model_id.strip().lower()) and not _PRO.search(row[0])):
        return None  # `gpt-5.4-pro` is not priced as `gpt-5.4`
    price: Price = row[1]
    return price


# --- asking a compatible server ---------------------------------------------------------------


async def ask_server(client: httpx2.AsyncClient, base_url: str, model_id: str) -> Limits | None:
    """The limits a compatible server states for `model_id`: vLLM's model list, then Ollama's.

    Any failure (the server has neither endpoint, is down, answers oddly) gives None: the
    caller falls back to the table or the default, and the chat request reports a dead server.
    """
    root = re.sub(r"/v1/?$", "", base_url.rstrip("/"))
    for probe in (_from_model_list, _from_lmstudio, _from_llamacpp, _from_ollama):
        found = await probe(client, base_url if probe is _from_model_list else root, model_id)
        if found is not None:
            return found
    return None


async def _get_json(client: httpx2.AsyncClient, method: str, url: str, **kwargs: Any) -> Any:
    try:
        response = await client.request(method, url, **kwargs)
        if response.status_code != 200:
            return None
        return response.json()
    except (httpx2.HTTPError, ValueError):
        return None


# The window a model list states, by server: vLLM, OpenRouter, Groq. (llama.cpp's
# `meta.n_ctx_train` is what the model was trained on, not what it serves: see `/props`.)
_LIST_FIELDS = ("max_model_len", "context_length", "context_window")


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def _from_model_list(client: httpx2.AsyncClient, base_url: str, model_id: str) -> Limits | None:
    body = await _get_json(client, "GET", f"{base_url.rstrip('/')}/models")
    rows = body.get("data") if isinstance(body, dict) else None
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and row.get("id") == model_id:
            window = next((w for f in _LIST_FIELDS if (w := _positive(row.get(f)))), None)
            if window is not None:
                return Limits(window, _output_cap(window), None, "server")
    return None


async def _from_lmstudio(client: httpx2.AsyncClient, root: str, model_id: str) -> Limits | None:
    # LM Studio's REST API: a loaded model's `loaded_context_length` is what it serves; one not
    # loaded yet is loaded on first use with the context length set in LM Studio's settings.
    body = await _get_json(client, "GET", f"{root}/api/v0/models/{model_id}")
    if not isinstance(body, dict) or body.get("id") != model_id:
        return None
    vision = body.get("type") == "vlm" if body.get("type") else None
    loaded = _positive(body.get("loaded_context_length"))
    if loaded is not None:
        return Limits(loaded, _output_cap(loaded), vision, "server")
    window = min(SERVER_DEFAULT_CONTEXT, _positive(body.get("max_context_length")) or SERVER_DEFAULT_CONTEXT)
    return Limits(window, _output_cap(window), vision, "lmstudio-default")


async def _from_llamacpp(client: httpx2.AsyncClient, root: str, model_id: str) -> Limits | None:
    # llama.cpp's server serves one model (any name is accepted) with `n_ctx` tokens per slot.
    body = await _get_json(client, "GET", f"{root}/props")
    settings = body.get("default_generation_settings") if isinstance(body, dict) else None
    window = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if window is None:
        return None
    modalities = body.get("modalities")
    vision = bool(modalities.get("vision")) if isinstance(modalities, dict) else None
    return Limits(window, _output_cap(window), vision, "server")


async def _from_ollama(client: httpx2.AsyncClient, root: str, model_id: str) -> Limits | None:
    # Ollama's native API sits at the root its OpenAI-compatible `/v1` hangs from.
    body = await _get_json(client, "POST", f"{root}/api/show", json={"model": model_id})
    if not isinstance(body, dict) or not isinstance(body.get("model_info"), dict):
        return None
    caps = body.get("capabilities")
    vision = "vision" in caps if isinstance(caps, list) else None
    num_ctx = re.search(r"(?m)^num_ctx\s+(\d+)", str(body.get("parameters") or ""))
    loaded = None if num_ctx else await _ollama_loaded_window(client, root, model_id)
    if num_ctx or loaded:
        window, source = int(num_ctx.group(1)) if num_ctx else int(loaded or 0), "server"
    else:
        # Without `num_ctx` the server picks the window when it loads the model (a loaded model
        # says which in `/api/ps`); before that Ollama's default stands, never the trained
        # maximum, which Ollama does not serve and past which it silently drops the prompt's start.
        window, source = SERVER_DEFAULT_CONTEXT, "ollama-default"
    trained = next((v for k, v in body["model_info"].items() if k.endswith(".context_length")), None)
    if isinstance(trained, int) and trained > 0:
        window = min(window, trained)
    return Limits(window, _output_cap(window), vision, source)


async def _ollama_loaded_window(client: httpx2.AsyncClient, root: str, model_id: str) -> int | None:
    body = await _get_json(client, "GET", f"{root}/api/ps")
    rows = body.get("models") if isinstance(body, dict) else None
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and model_id in (row.get("name"), row.get("model")):
            value = row.get("context_length")
            return value if isinstance(value, int) and value > 0 else None
    return None


def _output_cap(window: int) -> int:
    # A server states its window, not an output cap; a quarter of it (at most 8K) leaves the
    # prompt three quarters, and the compaction reserve is sized from this.
    return max(256, min(8_192, window // 4))


_WARNED: set[tuple[str, str]] = set()


def warn_default(where: str, model_id: str, limits: Limits) -> None:
    """Warn once per server and model that its budget is a default, saying how to set it."""
    if (where, model_id) in _WARNED:
        return
    _WARNED.add((where, model_id))
    if limits.source == "lmstudio-default":
        why = (
            f"LM Studio at {where} has not loaded `{model_id}` yet; budgeting the {limits.context_window:,} "
            "tokens it loads models with by default (set the context length in LM Studio)"
        )
    elif limits.source == "ollama-default":
        why = (
            f"Ollama at {where} serves `{model_id}` with its default context ({limits.context_window:,} "
            "tokens; more only with `num_ctx` in a Modelfile or `OLLAMA_CONTEXT_LENGTH` on the server)"
        )
    else:
        why = (
            f"flue_nb does not know the context window of `{model_id}` at {where} and the server "
            f"does not say; budgeting it as {limits.context_window:,} tokens with "
            f"{limits.max_output_tokens:,} of output"
        )
    warnings.warn(
        f"{why}. If it takes more, say so: OpenAIModel({model_id!r}, base_url=..., "
        "context_window=N, max_output_tokens=M).",
        UserWarning,
        stacklevel=2,
    )
