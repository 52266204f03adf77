"""A head start for the first message of a process: load what it will need, off its own path."""

from __future__ import annotations

import importlib

__all__ = ["warm"]

# In the order a first message imports them: two threads importing the same modules in the same
# order only ever wait for each other, never deadlock on a circular import.
_MODULES = ("flue_nb.runtime.session", "flue_nb.runtime.store.sqlite")


def warm(*, anthropic: bool, openai: bool = False) -> None:
    """Import the runtime, load the tokenizer and (when `anthropic`) the TLS context, then the SDK.

    `openai` imports the `openai` SDK (when installed) for an OpenAI-compatible model setting.
    Meant for a background thread at start-up; anything that fails here fails again, and is
    reported, when the first message really needs it. A first request made before the SDK is
    loaded does not wait for it (it goes out over plain httpx2), so the SDK comes last.
    """
    for name in _MODULES:
        importlib.import_module(name)
    from flue_nb.runtime.core.tokens import count_text

    count_text("warm up")
    from flue_nb.runtime.providers.streaming import tls_context

    if anthropic:
        from flue_nb.runtime.providers import anthropic as provider

        tls_context()  # the one context every client of the process shares
        provider.load_sdk()
    if openai:
        tls_context()  # shared by the openai SDK's clients too
        try:
            importlib.import_module("openai")
        except ImportError:
            pass  # the first request says which extra to install
