"""Warming up at extension load: what the first `%flue` cell needs, loaded on a background thread.

On its way to the first model request, a fresh kernel's first cell would import the runtime
(~0.3 s), the Anthropic SDK (1.2-1.6 s) and load the tokenizer (~0.4 s). A daemon thread started
when the extension loads does that while the person is still typing, so the cell is left with
only its own work. The SDK comes last and nothing waits for it: a request made before it has
loaded goes out over plain httpx2 (`runtime/providers/_anthropic_http.py`). Python's import lock makes this safe: a cell that needs a module still being
imported waits for that import to finish; it never sees half a module.

The SDK is imported only when a model setting or `ANTHROPIC_API_KEY` says it will be used (the
`openai` SDK when the setting is `openai/...` or `azure/...`), so a
kernel that works offline (or never runs `%flue`) does not pay its memory. `FLUE_WARMUP=0`
turns the whole thing off.

A kernel that a Jupyter server runs (its runtime dir announces one) and that has the `live` extra
also imports the live document (pycrdt, jupyter-ydoc, nbformat's schema checks: 1-3 s), so the
first notebook tool call does not pay it while the model waits (issue 33.10).
"""

from __future__ import annotations

import importlib
import os
import threading

__all__ = ["warm_up"]

# The notebook modules a `%flue` cell imports, before the runtime's own (flue_nb.runtime.warm).
_NOTEBOOK = ("flue_nb.notebook.kernel.assistant", "flue_nb.notebook.magics.run")
_started: list[threading.Thread] = []
# What the notebook tools import the first time they reach a live document.
_LIVE = ("flue_nb.notebook.document.live_document", "nbformat")


def _served() -> bool:
    """Whether a Jupyter server may be running this kernel's notebook, with the `live` extra here."""
    from importlib.util import find_spec

    from flue_nb.notebook.document.servers import own_connection_file, servers

    connection_file = own_connection_file()
    if connection_file is None or find_spec("pycrdt") is None or find_spec("jupyter_ydoc") is None:
        return False
    return bool(servers(connection_file=connection_file))


def warm_up(model_setting: str = "") -> threading.Thread | None:
    """Start loading the first cell's imports in the background (once per process).

    Args:
        model_setting: The configured model (`c.FlueMagics.model` or `$FLUE_MODEL`), if any.

    Returns:
        The warm-up thread (already started), or None when turned off or already started.
    """
    if _started or os.environ.get("FLUE_WARMUP", "").strip() in ("0", "false", "no"):
        return None
    setting = (model_setting or os.environ.get("FLUE_MODEL", "")).strip().lower()
    anthropic = setting.startswith(("anthropic", "bedrock", "vertex")) or (
        not setting and bool(os.environ.get("ANTHROPIC_API_KEY"))
    )
    openai = setting.startswith(("openai", "azure"))
    thread = threading.Thread(target=_load, args=(anthropic, openai), name="flue-warmup", daemon=True)
    _started.append(thread)
    thread.start()
    return thread


def _load(anthropic: bool, openai: bool = False) -> None:
    try:
        for name in _NOTEBOOK:
            importlib.import_module(name)
        from flue_nb.runtime.warm import warm

        warm(anthropic=anthropic, openai=openai)
        if _served():
            for name in _LIVE:
                importlib.import_module(name)
    except Exception:  # noqa: BLE001 - only a head start: the cell imports (and reports) itself
        pass
