"""Claude on Amazon Bedrock and Google Vertex AI: the Anthropic provider on the SDK's cloud clients.

`bedrock/<model-id>` and `vertex/<model-id>` run the Anthropic provider unchanged (its request
building, stream assembler and error table) on `anthropic.AsyncAnthropicBedrock` or
`anthropic.AsyncAnthropicVertex`. Those clients sign requests (AWS SigV4, Google credentials)
and Bedrock frames its stream in AWS event-stream, so the plain-httpx2 cold-start transport of
`anthropic.py` is never used for them: every request goes through the SDK.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from flue_nb.runtime.errors import ModelNotConfiguredError, ProviderHTTPError
from flue_nb.runtime.providers._catalog import model_info
from flue_nb.runtime.providers.anthropic import AnthropicModel
from flue_nb.runtime.providers.model import ModelRequest, ResponseDone, StreamEvent
from flue_nb.runtime.providers.streaming import IDLE_TIMEOUT, REQUEST_TIMEOUT, tls_context

__all__ = ["CloudClaudeModel", "cloud_model", "family_id"]

_SETUP = {
    "bedrock": (
        "Claude on Bedrock needs `pip install 'anthropic[bedrock]'` (botocore signs the requests and "
        "reads the stream), a region (`AWS_REGION` or `aws_region=`) and AWS credentials (the usual "
        "chain, or `AWS_BEARER_TOKEN_BEDROCK`)"
    ),
    "vertex": (
        "Claude on Vertex AI needs a region (`CLOUD_ML_REGION` or `region=`), a project "
        "(`ANTHROPIC_VERTEX_PROJECT_ID` or `project_id=`) and Google credentials "
        "(`pip install 'anthropic[vertex]'` for application-default credentials, or `access_token=`)"
    ),
}


def family_id(model_id: str) -> str:
    """The Anthropic id a cloud id stands for, to look its limits up.

    `us.anthropic.claude-sonnet-4-5-20250929-v1:0` (Bedrock, with an inference-profile region)
    and `claude-sonnet-4-5@20250929` (Vertex) are both `claude-sonnet-4-5-...`.
    """
    key = model_id.strip()
    key = key.split("anthropic.", 1)[1] if "anthropic." in key else key
    key = re.sub(r"-v\d+(:\d+)?$", "", key)
    return key.replace("@", "-")


class CloudClaudeModel(AnthropicModel):
    """An `AnthropicModel` whose requests go through the SDK's Bedrock or Vertex client."""

    def __init__(
        self,
        provider: str,
        model_id: str,
        *,
        max_tokens: int | None = None,
        thinking: dict[str, Any] | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        **client_options: Any,
    ) -> None:
        """`provider` is `bedrock` or `vertex`; `client_options` go to the SDK's client
        (`aws_region`, `aws_profile`, `api_key`, `base_url`; `region`, `project_id`, `access_token`)."""
        super().__init__(
            model_id,
            max_tokens=max_tokens,
            thinking=thinking,
            request_timeout=request_timeout,
            idle_timeout=idle_timeout,
        )
        self.provider = provider
        self._info = model_info(family_id(model_id))
        self._info = type(self._info)(
            id=f"{provider}/{model_id}",
            context_window=self._info.context_window,
            max_output_tokens=self._info.max_output_tokens,
        )  # no price: Bedrock's and Vertex's prices are their own (regional, provisioned)
        self._options = client_options

    def __repr__(self) -> str:
        return f"CloudClaudeModel({self.provider!r}, {self.model_id!r})"

    def new_client(self) -> Any:
        """A fresh SDK client for one call (a client's pool is bound to the loop that opened it)."""
        import anthropic
        import httpx2

        timeout = httpx2.Timeout(
            self._idle_timeout, connect=min(self._request_timeout, 30.0), pool=self._request_timeout
        )
        common: dict[str, Any] = {
            "max_retries": 0,
            "timeout": timeout,
            "http_client": anthropic.DefaultAsyncHttpxClient(verify=tls_context()),
        }
        try:
            if self.provider == "bedrock":
                return anthropic.AsyncAnthropicBedrock(**self._options, **common)
            return anthropic.AsyncAnthropicVertex(**self._options, **common)
        except (ValueError, ImportError) as exc:
            raise ModelNotConfiguredError(f"{_SETUP[self.provider]}: {exc}", model=self.model_id) from exc

    def _transport(self) -> Any:
        from flue_nb.runtime.providers import _anthropic_sdk as sdk

        return sdk.SdkTransport(self.new_client(), owned=True), sdk.translate

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response as `AnthropicModel` does; the response's model names the cloud."""
        try:
            async for event in super().stream(request):
                if isinstance(event, ResponseDone):
                    event.message.model = f"{self.provider}/{event.message.model or self.model_id}"
                yield event
        except ImportError as exc:  # botocore or google-auth, needed only at the request
            raise ModelNotConfiguredError(f"{_SETUP[self.provider]}: {exc}", model=self.model_id) from exc
        except ProviderHTTPError as exc:
            if exc.kind != "auth":
                raise
            # The Anthropic wording names ANTHROPIC_API_KEY, which plays no part here.
            cloud = "Bedrock" if self.provider == "bedrock" else "Vertex AI"
            raise ProviderHTTPError(
                f"{cloud} refused the request for `{self.model_id}` (HTTP {exc.status}). {_SETUP[self.provider]}; "
                "check that they may invoke this model in this region.",
                status=exc.status,
                kind="auth",
                **{k: v for k, v in exc.details.items() if k not in ("status", "kind")},
            ) from exc


def cloud_model(provider: str, model_id: str, **kwargs: Any) -> CloudClaudeModel:
    """The model for `bedrock/<model-id>` or `vertex/<model-id>`."""
    return CloudClaudeModel(provider, model_id, **kwargs)
