"""The OpenAI Responses API provider (`openai-responses/<model>`), through the official `openai` SDK.

OpenAI's pro and codex models answer only here, and reasoning models keep their reasoning
across turns only here: every response is asked for with `store=False` and, for OpenAI's
reasoning models, `include=["reasoning.encrypted_content"]`, and its reasoning items go back
in the next request's input unchanged (`_responses_wire` says how the items are kept). Nothing is
stored at OpenAI and no `previous_response_id` is used: the conversation lives in flue_nb's store
like any other, so retries, compaction, abort and recovery work as on chat completions.

Everything but the request and the stream's reading is `OpenAIModel`'s: credentials, the client,
timeouts, limits and prices (`openai/<id>` in the same tables), error classification.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Literal

from flue_nb.runtime.providers._responses_wire import ResponsesAssembler, to_responses_input, to_responses_tools
from flue_nb.runtime.providers.model import ModelRequest
from flue_nb.runtime.providers.openai import OpenAIModel

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIResponsesModel", "reasons"]

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


def reasons(model_id: str) -> bool:
    """Whether OpenAI's `model_id` reasons (and so can send its reasoning back encrypted): the
    o-series and the GPT-5 family but `gpt-5-chat`; older chat models refuse the `include`."""
    key = model_id.strip().lower()
    return key.startswith(("o1", "o3", "o4", "gpt-5", "codex")) and not key.startswith("gpt-5-chat")


class OpenAIResponsesModel(OpenAIModel):
    """A `Model` on the Responses API of OpenAI or a server that speaks it (vLLM, Ollama, LM Studio)."""

    provider_name = "openai"
    """The GenAI `gen_ai.provider.name` (the same as chat completions': it is OpenAI either way)."""
    _API = "Responses API"
    _END = "`response.completed`"

    def __init__(
        self,
        model: str,
        *,
        reasoning_effort: ReasoningEffort | None = None,
        reasoning_summary: Literal["auto", "concise", "detailed"] | None = None,
        store: bool = False,
        **kwargs: Any,
    ) -> None:
        """Configure the model; every other keyword is `OpenAIModel`'s (`base_url`, `api_key`,
        `context_window`, `max_output_tokens`, `vision`, `client`, the timeouts).

        Args:
            model: The model id, e.g. `gpt-5.1-codex-max`.
            reasoning_effort: Sent as `reasoning.effort` (default: the model's own).
            reasoning_summary: Ask for reasoning summaries, shown as thinking (`auto` is what
                most want). Off by default: OpenAI answers it with an error for organisations
                it has not verified.
            store: Let OpenAI keep the responses (default False: nothing is kept there, and
                reasoning travels encrypted in each request instead).
        """
        super().__init__(model, **kwargs)
        self._effort = reasoning_effort
        self._summary = reasoning_summary
        self._store = store

    def __repr__(self) -> str:
        return f"OpenAIResponsesModel({self.model_id!r}, base_url={self.base_url!r})"

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of `responses.create` for `request` (without `stream`)."""
        params: dict[str, Any] = {
            "model": self.model_id,
            "input": to_responses_input(request.messages, vision=self.vision, model=self.model_id),
            "store": self._store,
            "max_output_tokens": request.max_tokens or self.info.max_output_tokens,
        }
        if request.system:
            params["instructions"] = request.system
        if not self._store and reasons(self.model_id):
            # What lets the reasoning go back without OpenAI keeping it. Decided by the model's
            # name, not the host: a gateway in front of OpenAI passes it through, and the models
            # of compatible servers (gpt-oss, Qwen, ...) are not named so.
            params["include"] = ["reasoning.encrypted_content"]
        reasoning = {k: v for k, v in (("effort", self._effort), ("summary", self._summary)) if v}
        if reasoning:
            params["reasoning"] = reasoning
        if request.tools:
            params["tools"] = to_responses_tools(request.tools)
            params["tool_choice"] = "auto"
        return params

    def _assembler(self) -> ResponsesAssembler:
        return ResponsesAssembler(self.model_id, provider=self.label())

    def _start(self, client: openai.AsyncOpenAI, params: dict[str, Any]) -> Awaitable[Any]:
        return client.responses.create(**params, stream=True)
