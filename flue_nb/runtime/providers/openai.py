"""The OpenAI-compatible provider: chat completions through the official `openai` SDK.

One class talks to OpenAI, Azure OpenAI and any server that speaks the chat-completions API
(Ollama, vLLM, llama.cpp's server, LM Studio). It translates and nothing more: retries belong
to the runtime (contract 11.3), so the SDK's own are off. The SDK is imported only when a
request is made (`pip install 'flue_nb[openai]'`); `import flue_nb` never pays for it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx2

from flue_nb.runtime.errors import ConfigError, ModelNotConfiguredError, ProviderError
from flue_nb.runtime.providers import check_model_request
from flue_nb.runtime.providers._openai_errors import translate_errors
from flue_nb.runtime.providers._openai_limits import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_OUTPUT_TOKENS,
    Limits,
    ask_server,
    known,
    warn_default,
)
from flue_nb.runtime.providers._openai_wire import ChunkAssembler, to_chat_messages, to_chat_tools
from flue_nb.runtime.providers.model import ModelInfo, ModelRequest, ResponseDone, StreamEvent
from flue_nb.runtime.providers.streaming import IDLE_TIMEOUT, REQUEST_TIMEOUT, cap, relay, tls_context
from flue_nb.runtime.redact import register_secret

if TYPE_CHECKING:
    import openai

__all__ = ["AZURE_API_VERSION", "OPENAI_BASE_URL", "OpenAIModel"]

OPENAI_BASE_URL = "https://api.openai.com/v1"
AZURE_API_VERSION = "2024-10-21"
"""The Azure OpenAI API version used when neither `api_version=` nor `OPENAI_API_VERSION` says
one (a GA version that streams usage)."""

_NO_SDK = (
    "The OpenAI-compatible provider needs the `openai` SDK: `pip install 'flue_nb[openai]'` "
    "(or `pip install openai`), then restart the kernel."
)

# Limits learnt from a server, per (base URL, model): the assistant builds a fresh model object
# for every cell, and the server must not be asked again each time.
_LEARNT: dict[tuple[str, str], Limits] = {}


class OpenAIModel:
    """A `Model` on the chat-completions API of OpenAI, Azure OpenAI or any compatible server."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        vision: bool | None = None,
        azure_endpoint: str | None = None,
        api_version: str | None = None,
        client: openai.AsyncOpenAI | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        """Configure the model; credentials are checked when `stream` is first called.

        Args:
            model: The model id the server knows (for Azure: the deployment name).
            base_url: A compatible server's API root, e.g. `http://localhost:11434/v1`; wins over
                `OPENAI_BASE_URL` (default: OpenAI's API).
            api_key: Wins over `OPENAI_API_KEY` (`AZURE_OPENAI_API_KEY` for Azure). A server
                given by `base_url` may need none.
            context_window: Tokens a prompt may use; default: the table for OpenAI's models,
                else what the server says (vLLM, Ollama), else 8,192 with a warning.
            max_output_tokens: Output cap sent with every request (the same sources).
            vision: Whether the model takes images (default: the table, or Ollama's
                capabilities; unknown means no, and images become a note).
            azure_endpoint: An Azure OpenAI resource (`https://NAME.openai.azure.com`); wins
                over `AZURE_OPENAI_ENDPOINT` and selects the SDK's `AsyncAzureOpenAI`.
            api_version: Azure's API version (default `OPENAI_API_VERSION`, else `AZURE_API_VERSION`).
            client: A ready SDK client (the caller owns it and its settings).
            request_timeout: Seconds to wait for a response to start, then a retryable timeout.
            idle_timeout: Seconds a stream may stay silent before the same error.
        """
        self.model_id = model
        self._base_url = base_url
        self._api_key = api_key
        self._azure_endpoint = azure_endpoint
        self._api_version = api_version
        self._client = client
        self._request_timeout = request_timeout
        self._idle_timeout = idle_timeout
        self._explicit = (context_window, max_output_tokens, vision)
        self._limits: Limits | None = None
        self._info = self._make_info(self._initial_limits())

    # --- who we talk to -----------------------------------------------------------------------

    @property
    def azure(self) -> bool:
        """Whether requests go to Azure OpenAI."""
        if self._client is not None:
            return type(self._client).__name__ == "AsyncAzureOpenAI"
        return bool(self._azure_endpoint)

    @property
    def base_url(self) -> str:
        """The API root requests go to."""
        if self._client is not None:
            return str(self._client.base_url).rstrip("/")
        if self._azure_endpoint:
            return f"{self._azure_endpoint.rstrip('/')}/openai"
        return (self._base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL).rstrip("/")

    @property
    def provider(self) -> str:
        """Who answers, for messages and provenance: `openai`, `azure`, or the server's host."""
        if self.azure:
            return "azure"
        host = httpx2.URL(self.base_url).host
        return "openai" if host == "api.openai.com" else host

    def _official(self) -> bool:
        return self.provider in ("openai", "azure")

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model_id!r}, base_url={self.base_url!r})"

    # --- limits ------------------------------------------------------------------------------

    @property
    def info(self) -> ModelInfo:
        """Context window and output limits of this model (see `prepare` for servers)."""
        return self._info

    def _initial_limits(self) -> Limits | None:
        window, output, _ = self._explicit
        table = known(self.model_id) if self._official() else None
        if window is not None:
            vision = table.vision if table is not None else None  # a given window keeps what the table knows
            return Limits(window, output or max(256, min(8_192, window // 4)), vision, "given")
        return table if self._official() else _LEARNT.get((self.base_url, self.model_id))

    def _make_info(self, limits: Limits | None) -> ModelInfo:
        self._limits = limits
        base = limits or Limits(DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT_TOKENS, None, "default")
        window, output, _ = self._explicit
        base = replace(
            base, context_window=window or base.context_window, max_output_tokens=output or base.max_output_tokens
        )
        from flue_nb.runtime.providers import price_of

        return ModelInfo(
            id=self.response_model(self.model_id),  # as responses name it: status reads the same
            context_window=base.context_window,
            max_output_tokens=base.max_output_tokens,
            price=price_of(self.response_model(self.model_id)),
        )

    @property
    def vision(self) -> bool:
        """Whether images are sent as images (else as a note naming them)."""
        if self._explicit[2] is not None:
            return self._explicit[2]
        return bool(self._limits.vision) if self._limits is not None else False

    async def prepare(self) -> None:
        """Learn the window from the server once, before the first call (the loop awaits this)."""
        if self._limits is not None:
            return
        key = (self.base_url, self.model_id)
        limits = _LEARNT.get(key)
        if limits is None and not self._official():
            try:
                check_model_request(httpx2.URL(self.base_url).host, provider="the model server")
            except ConfigError:
                return  # the request itself will say so
            timeout = httpx2.Timeout(5.0)
            async with httpx2.AsyncClient(timeout=timeout, verify=tls_context(), headers=self._auth_headers()) as http:
                limits = await ask_server(http, self.base_url, self.model_id)
        if limits is None:
            limits = known(self.model_id) or Limits(DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT_TOKENS, None, "default")
        _LEARNT[key] = limits
        if limits.source in ("default", "ollama-default", "lmstudio-default"):
            warn_default(self.base_url, self.model_id, limits)
        self._info = self._make_info(limits)

    def response_model(self, model: str | None) -> str:
        """How a response's model is recorded: `openai/<id>` from OpenAI, `<provider>/<id>` else.

        The provider prefix keeps prices honest (only OpenAI's own API is priced) and names the
        provider in every cell's provenance.
        """
        return f"{self.provider}/{model or self.model_id}"

    # --- the request -------------------------------------------------------------------------

    def _key(self) -> str | None:
        if self._api_key:
            return self._api_key
        env = "AZURE_OPENAI_API_KEY" if self.azure else "OPENAI_API_KEY"
        return os.environ.get(env) or None

    def _auth_headers(self) -> dict[str, str]:
        key = self._key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _new_client(self) -> openai.AsyncOpenAI:
        try:
            import openai
        except ImportError as exc:
            raise ModelNotConfiguredError(_NO_SDK, model=self.model_id) from exc
        key = self._key()
        env = "AZURE_OPENAI_API_KEY" if self.azure else "OPENAI_API_KEY"
        if key is None and self._official():
            raise ModelNotConfiguredError(
                f"No API key for `{self.model_id}`: set `{env}` (or pass `api_key=` to `{type(self).__name__}`). "
                "A local server needs none: give its `base_url=` (or `OPENAI_BASE_URL`).",
                model=self.model_id,
            )
        register_secret(env, key)  # the key in use never reaches a tool result (runtime.redact)
        timeout = httpx2.Timeout(
            self._idle_timeout, connect=min(self._request_timeout, 30.0), pool=self._request_timeout
        )
        http = openai.DefaultAsyncHttpxClient(verify=tls_context())
        common: dict[str, Any] = {"max_retries": 0, "timeout": timeout, "http_client": http}
        if self.azure:
            version = self._api_version or os.environ.get("OPENAI_API_VERSION") or AZURE_API_VERSION
            return openai.AsyncAzureOpenAI(
                azure_endpoint=self._azure_endpoint or "", api_version=version, api_key=key, **common
            )
        # A keyless local server still gets a header: the SDK insists on a key.
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=key or "none", **common)

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create` for `request` (without `stream`)."""
        params: dict[str, Any] = {
            "model": self.model_id,
            "messages": to_chat_messages(request.system, request.messages, vision=self.vision, model=self.model_id),
            "stream_options": {"include_usage": True},
        }
        # OpenAI's reasoning models refuse `max_tokens`; compatible servers know only that name.
        cap = "max_completion_tokens" if self._official() else "max_tokens"
        params[cap] = request.max_tokens or self._info.max_output_tokens
        if request.tools:
            # Compatible servers get schemas without length and pattern limits (a grammar
            # builder expands them into thousands of rules), and an explicit `tool_choice`:
            # llama.cpp's server leaves the tools out of the prompt without one.
            params["tools"] = to_chat_tools(request.tools, limits=self._official())
            params["tool_choice"] = "auto"
        return params

    # What differs between the APIs this class and `OpenAIResponsesModel` speak.
    _API = "chat-completions"
    """What a stream of this API is called in messages."""
    _END = "a finish_reason"
    """What a whole stream ends with."""

    def _assembler(self) -> Any:
        """A fresh reader of this API's stream (`feed`, `chunks`, `finished`, `message()`)."""
        return ChunkAssembler(self.model_id)

    def _start(self, client: openai.AsyncOpenAI, params: dict[str, Any]) -> Awaitable[Any]:
        """Send the request; what it returns is the SDK's stream of events."""
        return client.chat.completions.create(**params, stream=True)

    def label(self) -> str:
        """Who answers, as messages name it: `OpenAI`, `Azure OpenAI` or `the server at URL`."""
        return {"openai": "OpenAI", "azure": "Azure OpenAI"}.get(self.provider, f"the server at {self.base_url}")

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response; raise `ProviderError` on failure. Cancellation aborts it."""
        params = self.request_params(request)
        label = self.label()
        key_hint = (
            "`AZURE_OPENAI_API_KEY`"
            if self.azure
            else f"`OPENAI_API_KEY` (or the `api_key` given to `{type(self).__name__}`)"
        )
        client = self._client or self._new_client()  # a missing key is said before anything else
        try:
            check_model_request(httpx2.URL(self.base_url).host, provider=label)
        except ConfigError:
            if self._client is None:
                await client.close()
            raise
        assembler = self._assembler()
        body = _BodyStart()
        try:
            with translate_errors(self.model_id, provider=label, key_hint=key_hint, url=self.base_url):
                started = body.watch(self._start(client, params))
                timeout = self._request_timeout
                async for out in relay(started, assembler.feed, timeout=timeout, label=label, model_id=self.model_id):
                    yield out
        finally:
            if self._client is None:
                await client.close()
        if not assembler.chunks:
            # A 200 without a single chunk is no stream at all (a proxy's sign-in page, a server
            # that ignores `stream: true`): asking again brings the same page back.
            raise ProviderError(
                f"The server at {self.base_url} answered `{self.model_id}` with {body.content_type or 'no content type'}, "
                f"not a {self._API} stream: {body.text() or '(an empty body)'}. Check that `base_url` is the "
                "API root of an OpenAI-compatible server (usually ending in /v1) and that nothing between "
                "(a proxy, a sign-in page) answers in its place.",
                kind="bad_request",
                model=self.model_id,
                final=True,
            )
        if not assembler.finished:
            # The connection closed early: half a tool call must never pass for a whole one.
            raise ProviderError(
                f"The stream from {label} for `{self.model_id}` ended before {self._END}.",
                kind="connection",
                model=self.model_id,
            )
        message = assembler.message()
        message.model = self.response_model(message.model)
        yield ResponseDone(message)


class _BodyStart:
    """The content type and first bytes of a streamed response, kept to say what came back
    when it was not a stream."""

    LIMIT = 300

    def __init__(self) -> None:
        self.content_type = ""
        self.head = bytearray()

    async def watch(self, start: Awaitable[Any]) -> Any:
        """Await the SDK's stream and keep an eye on the bytes it reads from its response."""
        stream = await start
        response = getattr(stream, "response", None)
        if response is None:
            return stream
        self.content_type = response.headers.get("content-type", "").split(";")[0].strip()
        read = response.aiter_bytes

        async def aiter_bytes(*args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
            async for chunk in read(*args, **kwargs):
                if len(self.head) < self.LIMIT:
                    self.head += chunk[: self.LIMIT - len(self.head)]
                yield chunk

        # The SDK reads the body through this one method; the stream is not started yet.
        response.aiter_bytes = aiter_bytes
        return stream

    def text(self) -> str:
        """The body's start as one line, secrets redacted."""
        return cap(" ".join(self.head.decode("utf-8", "replace").split()), self.LIMIT)
