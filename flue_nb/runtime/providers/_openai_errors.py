"""The `openai` SDK's failures onto flue_nb's closed error table, as the Anthropic provider's are.

Rate limits, overload, server faults, broken or silent connections and malformed streams are
transient (the runtime retries them, honouring `retry-after`); a prompt that does not fit is a
`ContextOverflowError` (the runtime compacts and retries once); credentials, quota and bad
requests are not retried. Only `translate_errors` imports the SDK, and only when it is used.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx2

from flue_nb.runtime.errors import ContextOverflowError, ProviderError, ProviderErrorKind, ProviderHTTPError
from flue_nb.runtime.providers.streaming import MAX_ERROR_TEXT, cap, capitalized, nothing_listening, retry_after

__all__ = ["OVERFLOW", "stream_failure", "translate_errors"]

# OpenAI: "This model's maximum context length is 128000 tokens. However, your messages resulted
# in ..." (code `context_length_exceeded`); vLLM: the same sentence, or "The input (N tokens) is
# longer than the model's context length (M tokens)"; llama.cpp: "the request exceeds the
# available context size".
OVERFLOW = re.compile(
    r"maximum context length|context length|context_length_exceeded|exceeds? the available context"
    r"|context window|prompt is too long|too many (input )?tokens",
    re.IGNORECASE,
)

_RESPONSES_ONLY = re.compile(
    r"only supported in v1/responses|only available (in|on|through) the responses api", re.IGNORECASE
)
"""OpenAI's words for a model that chat completions do not serve ("This model is only supported
in v1/responses and not in v1/chat/completions.")."""

_KIND_BY_STATUS: dict[int, ProviderErrorKind] = {
    401: "auth", 403: "auth", 408: "timeout", 429: "rate_limit", 503: "overloaded", 529: "overloaded",
}  # fmt: skip


@contextlib.contextmanager
def translate_errors(model_id: str, *, provider: str, key_hint: str, url: str = "") -> Iterator[None]:
    """Re-raise the SDK's (and httpx2's) exceptions as classified `ProviderError`s.

    `provider` names the service in messages (`OpenAI`, `Azure OpenAI`, the server's host);
    `key_hint` says where the key comes from, for authentication failures; `url` is the API
    root, named when a loopback server refuses the connection.
    """
    import openai

    try:
        yield
    except ProviderError:
        raise
    except openai.APIStatusError as exc:
        raise _status_error(exc, model_id, provider, key_hint) from exc
    except (openai.APITimeoutError, httpx2.TimeoutException) as exc:
        raise ProviderError(
            f"The request to {provider} for `{model_id}` timed out.", kind="timeout", model=model_id
        ) from exc
    except openai.APIConnectionError as exc:
        raise _connection(exc, model_id, provider, url) from exc
    except openai.APIError as exc:
        # No status: an error object inside a 200 stream (`data: {"error": ...}`).
        raise stream_failure(exc.body, model_id, provider, fallback=str(exc)) from exc
    except (json.JSONDecodeError, UnicodeDecodeError, httpx2.DecodingError) as exc:
        raise ProviderError(
            f"The stream from {provider} for `{model_id}` was malformed ({cap(str(exc), 200)}).",
            kind="server",
            model=model_id,
            mid_stream=True,
        ) from exc
    except httpx2.TransportError as exc:
        raise _connection(exc, model_id, provider, url) from exc


def _connection(exc: Exception, model_id: str, provider: str, url: str = "") -> ProviderError:
    setting = "`base_url` (or `OPENAI_BASE_URL`)"
    if (refused := nothing_listening(exc, url=url, model_id=model_id, setting=setting)) is not None:
        return refused
    cause = exc.__cause__ or exc
    return ProviderError(
        f"Lost the connection to {provider} for `{model_id}`: {cause}", kind="connection", model=model_id
    )


def _fields(body: object) -> tuple[str, str, str]:
    """(message, type, code) of an error body, whichever shape the server sent."""
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        message = error.get("message") or error.get("detail") or json.dumps(error)[:MAX_ERROR_TEXT]
        return str(message), str(error.get("type") or ""), str(error.get("code") or "")
    return str(error or ""), "", ""


def _status_error(exc: Any, model_id: str, provider: str, key_hint: str) -> ProviderError:
    status: int = exc.status_code
    message, error_type, code = _fields(exc.body)
    text = cap(message or exc.message, MAX_ERROR_TEXT)
    headers = exc.response.headers
    details: dict[str, Any] = {"model": model_id, "error_type": cap(error_type, 100) or None}
    if code:
        details["error_code"] = cap(code, 100)
    if request_id := headers.get("x-request-id"):
        details["request_id"] = request_id
    if (hint := retry_after(headers)) is not None:
        details["retry_after"] = hint
    if status in (400, 413, 422) and (code == "context_length_exceeded" or OVERFLOW.search(text)):
        return ContextOverflowError(f"The prompt is too long for `{model_id}`: {text}", status=status, **details)
    kind = _KIND_BY_STATUS.get(status) or ("server" if status >= 500 else "bad_request")
    if status == 429 and code == "insufficient_quota":
        # Retrying does not refill an account: say what to do instead.
        message = f"{capitalized(provider)} says the account behind the key has no quota left (HTTP 429: {text}). Check its plan and billing."
        return ProviderHTTPError(message, status=status, kind="auth", **details)
    if kind == "auth":
        what = "rejected the credentials" if status == 401 else "denied access"
        message = f"{capitalized(provider)} {what} (HTTP {status}: {text}). Check {key_hint} and that the key may use `{model_id}`."
    elif _RESPONSES_ONLY.search(text):
        # OpenAI's pro and codex models answer only on the Responses API.
        message = (
            f"{capitalized(provider)} serves `{model_id}` only on the Responses API (HTTP {status}: {text}). "
            f"Use `openai-responses/{model_id}` (or `OpenAIResponsesModel`)."
        )
    elif status == 404:
        message = f"{capitalized(provider)} has no `{model_id}` (HTTP 404: {text}). Check the model name (for Azure, the deployment)."
    else:
        message = (
            f"{capitalized(provider)} returned HTTP {status} for `{model_id}` ({error_type or 'no error type'}): {text}"
        )
    return ProviderHTTPError(message, status=status, kind=kind, **details)


def stream_failure(body: object, model_id: str, provider: str, *, fallback: str = "") -> ProviderError:
    """The error for an error object a 200 stream carried (`data: {"error": ...}`, a Responses
    `error` event, a `response.failed`), classified like an HTTP status would be."""
    message, error_type, code = _fields(body)
    text = cap(message or fallback, MAX_ERROR_TEXT)
    details: dict[str, Any] = {"model": model_id, "error_type": cap(error_type, 100) or None, "mid_stream": True}
    if code:
        details["error_code"] = cap(code, 100)
    if OVERFLOW.search(text) or code == "context_length_exceeded":
        return ContextOverflowError(f"The prompt is too long for `{model_id}`: {text}", status=200, **details)
    label = f"{error_type} {code}".lower()
    if "insufficient_quota" in label:
        # Said in the stream, not by a 429: retrying does not refill an account either.
        return ProviderError(
            f"{capitalized(provider)} says the account behind the key has no quota left ({text}). Check its plan and billing.",
            kind="auth",
            **details,
        )
    kind: ProviderErrorKind
    if "rate" in label or code == "429":
        kind = "rate_limit"
    elif "overload" in label or code in ("503", "529"):
        kind = "overloaded"
    elif "invalid" in label or "badrequest" in label.replace("_", "") or code == "400":
        kind = "bad_request"
    else:
        # A generation that failed part-way is the server's fault (vLLM sends its engine errors
        # so): worth another try.
        kind = "server"
    return ProviderError(
        f"The stream from {provider} for `{model_id}` failed mid-response: {text}", kind=kind, **details
    )
