"""The default notebook agent behind `%flue`: an assistant working in the live kernel.

Its sandbox is `flue.kernel()`: the kernel's working directory and namespace, with the `python`
tool's code run on the kernel's main thread while a cell waits. Its model comes from the magics'
settings; `resolve_spec` turns a setting into what `use_model` takes and says, in one paragraph,
how to configure one when there is none.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from flue_nb.notebook.kernel.sandbox import kernel
from flue_nb.runtime.agent import AgentDef, agent
from flue_nb.runtime.agent.hooks import use_model, use_sandbox
from flue_nb.runtime.errors import ConfigError, ModelNotConfiguredError
from flue_nb.runtime.sandbox.contain import check_level
from flue_nb.runtime.tools.rules import ApprovalRules

if TYPE_CHECKING:
    from flue_nb.runtime.providers.model import Model

__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "NO_MODEL_HELP",
    "NoModelError",
    "missing_key_help",
    "make_assistant",
    "resolve_spec",
]

DEFAULT_ANTHROPIC_MODEL = "anthropic/claude-sonnet-4-6"
"""Used when nothing names a model but `ANTHROPIC_API_KEY` is set."""

INSTRUCTIONS = """\
You are a helpful assistant working inside the user's live Jupyter notebook. The `python` tool \
runs code in the kernel's own namespace: the user's variables are there, and what you define \
stays for them. Look at data with `python` rather than guessing, keep outputs small, and use \
the file and shell tools for the working directory. Answer concisely; say what you changed."""

NO_MODEL_HELP = """\
flue: no model is configured, so nobody can answer. Set one in any of these ways:
  • %env ANTHROPIC_API_KEY=sk-ant-...    in a cell, no restart: picks anthropic/claude-sonnet-4-6 (then delete the cell, it shows the key)
  • %config FlueMagics.model = "anthropic/claude-sonnet-4-6"    this kernel (or c.FlueMagics.model in ipython_kernel_config.py)
  • export FLUE_MODEL=anthropic/claude-sonnet-4-6    before starting Jupyter (ANTHROPIC_API_KEY alone picks that model)
  • %%flue -m SPEC    one cell: anthropic/<id>, openai/<id> (OPENAI_API_KEY, or OPENAI_BASE_URL for Ollama, vLLM), openai-responses/<id>, or a Model object's name
  • offline: an @flue_nb.agent that calls use_model(ScriptedModel([...])), then %flue use NAME (or --agent NAME)"""


NoModelError = ModelNotConfiguredError
"""No model setting and no `ANTHROPIC_API_KEY`: `%flue` has nothing to talk to (the same class)."""


_KEY_ENV = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
    "azure": "AZURE_OPENAI_API_KEY",
}
_KEY_SHAPE = {"anthropic": "sk-ant-...", "openai": "sk-...", "openai-responses": "sk-...", "azure": "..."}


def missing_key_help(model: str, message: str) -> str:
    """What a cell says when its named model has no credentials: plain text (a traceback shows
    backticks as they are) ending in the `%env` line that fixes it without a restart."""
    provider = model.replace(":", "/", 1).split("/", 1)[0].strip().lower()
    env = _KEY_ENV.get(provider)
    if env is None or os.environ.get(env):
        return "flue: " + message.replace("`", "")
    return (
        f"flue: no API key for {model}: {env} is not set. Run this in a cell (no restart needed; "
        f"then delete the cell, it shows the key) and run this one again:\n  %env {env}={_KEY_SHAPE[provider]}"
    )


def resolve_spec(setting: str | None, namespace: dict[str, Any]) -> str | Model:
    """The model for the assistant: a spec string, or a Model object named in the namespace.

    Precedence is the caller's (cell option, then config, then `FLUE_MODEL`); with nothing set,
    `ANTHROPIC_API_KEY` selects `DEFAULT_ANTHROPIC_MODEL`, else `NoModelError` is raised.
    """
    setting = (setting or "").strip()
    if not setting:
        if os.environ.get("ANTHROPIC_API_KEY"):
            return DEFAULT_ANTHROPIC_MODEL
        raise NoModelError(NO_MODEL_HELP)
    if "/" not in setting and setting.isidentifier() and setting in namespace:
        from flue_nb.runtime.providers.model import Model

        obj = namespace[setting]
        if not isinstance(obj, Model):
            raise ConfigError(f"`{setting}` in the namespace is a {type(obj).__name__}, not a model")
        return obj
    return setting


_cache: dict[tuple[Any, ...], AgentDef] = {}


def make_assistant(
    model: str | Model,
    *,
    approval: Any = "allow",
    cwd: str | None = None,
    approval_timeout: float | None = None,
    sandbox: str = "auto",
    allow_hosts: Sequence[str] = (),
    hide_paths: Sequence[str] = (),
    python_tool: str = "hidden",
) -> AgentDef:
    """The notebook assistant for a model; the same settings give the same agent object.

    Reusing one `AgentDef` matters: a conversation whose agent changes is reopened, and its
    sandbox (built once here) keeps the tools' per-path locks and the `python` cell counter.
    """
    key = (
        id(model) if not isinstance(model, str) else model,
        ApprovalRules.of(approval).key(),  # a dict of rules is not hashable; its JSON is
        cwd or os.getcwd(),
        approval_timeout or None,
        sandbox,
        tuple(allow_hosts),
        tuple(hide_paths),
        python_tool,
    )
    found = _cache.get(key)
    if found is not None:
        return found
    # kernel() runs `python` on the kernel's main thread while a cell blocks on the run.
    box = kernel(
        cwd,
        approval=approval,
        approval_timeout=approval_timeout or None,
        sandbox=check_level(sandbox),
        allow_hosts=list(allow_hosts),
        hide_paths=list(hide_paths),
        python_tool=python_tool,  # type: ignore[arg-type]
    )

    @agent(name="assistant")
    def assistant() -> str:
        use_model(model)
        use_sandbox(box)
        return INSTRUCTIONS

    _cache[key] = assistant
    return _cache[key]
