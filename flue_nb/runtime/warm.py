"""A head start for the first message of a process: load what it will need, off its own path."""

from __future__ import annotations

import importlib

__all__ = ["warm"]

# In the order a first message imports them: two threads importing the same modules in the same
# order only ever wait for each other, never deadlock on a circular import.
_MODULES = ("flue_nb.runtime.session", "flue_nb.runtime.store.sqlite")


def warm(*, anthropic: bool) -> None:
    """Import the runtime, the tokenizer and (when `anthropic`) the SDK and its TLS context.

    Meant for a background thread at start-up; anything that fails here fails again, and is
    reported, when the first message really needs it.
    """
    for name in _MODULES:
        importlib.import_module(name)
    if anthropic:
        from flue_nb.runtime.providers import anthropic as provider

        provider._tls_context()  # the one context every client of the process shares
    from flue_nb.runtime.core.tokens import count_text

    count_text("warm up")
