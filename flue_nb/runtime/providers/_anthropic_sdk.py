"""The Messages API through the official `anthropic` SDK: every request once the SDK is loaded.

This is the only module that imports `anthropic` (over a second of imports; see
`_anthropic_http` for what runs meanwhile). The SDK's own retries are off: they belong to the
runtime (contract 11.3). `translate` is the one place that knows the SDK's exception types.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2

from flue_nb.runtime.errors import ProviderError
from flue_nb.runtime.providers import anthropic as provider
from flue_nb.runtime.providers._anthropic_http import StatusFailure

__all__ = ["LOADED", "SdkTransport", "translate"]


class SdkTransport:
    """One streamed Messages API call on an SDK client (closed by `close` when it is ours)."""

    def __init__(self, client: anthropic.AsyncAnthropic, *, owned: bool) -> None:
        self.client = client
        self._owned = owned

    @classmethod
    def new(
        cls, *, credential: tuple[str, str], base_url: str | None, timeout: httpx2.Timeout, verify: Any
    ) -> SdkTransport:
        """A transport on a client of its own, with the given credential and timeouts."""
        name, secret = credential
        key, token = (secret, None) if name == "api_key" else (None, secret)
        http_client = anthropic.DefaultAsyncHttpxClient(verify=verify)
        kw: dict[str, Any] = dict(
            api_key=key, auth_token=token, base_url=base_url, max_retries=0, http_client=http_client, timeout=timeout
        )
        try:
            # flue.instrument()'s `chat` span covers this transport and the cold-start one alike;
            # the SDK's own span of the same call would count its tokens twice.
            client = anthropic.AsyncAnthropic(**kw, open_telemetry=False)
        except TypeError:  # an SDK older than its OpenTelemetry support emits no spans
            client = anthropic.AsyncAnthropic(**kw)
        return cls(client, owned=True)

    @property
    def base_url(self) -> str:
        """The API root requests go to."""
        return str(self.client.base_url).rstrip("/")

    @property
    def host(self) -> str:
        """The host the request goes to."""
        return str(self.client.base_url.host)

    async def start(self, params: dict[str, Any]) -> Any:
        """Send the request; return the SDK's event stream once the response has started."""
        return await self.client.messages.create(**params, stream=True)

    async def close(self) -> None:
        """Close the client, unless the caller gave it (then the caller owns it)."""
        if self._owned:
            await self.client.close()


def translate(exc: Exception, model_id: str) -> ProviderError | None:
    """The `ProviderError` for one of the SDK's exceptions; None for any other exception."""
    if isinstance(exc, anthropic.APIStatusError):
        failure = StatusFailure(exc.message, status=exc.status_code, body=exc.body, headers=exc.response.headers)
        return provider.status_error(failure, model_id)
    if isinstance(exc, anthropic.APITimeoutError):
        return provider.timeout_error(model_id)
    if isinstance(exc, anthropic.APIConnectionError):
        return provider.connection_error(exc, model_id)
    if isinstance(exc, anthropic.APIError):
        return ProviderError(f"Anthropic API error for `{model_id}`: {exc}", kind="other", model=model_id)
    return None


LOADED = True
"""Set last: the module (and so the SDK) is wholly imported, not still importing on a thread."""
