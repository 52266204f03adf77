"""Loading the extension (`%load_ext flue_nb`): the magics, their input transform, the warm-up,
the frontend watch, the cell log and the shutdown and interrupt hooks; and unloading it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flue_nb.notebook.magics._line import protect_line_magic
from flue_nb.notebook.magics.flue import FlueMagics

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from flue_nb.runtime.session import Session

__all__ = ["load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """Register the `%flue` magics (idempotent)."""
    if "flue" not in ipython.magics_manager.magics["line"]:
        ipython.register_magics(FlueMagics)
    transforms = ipython.input_transformer_manager.line_transforms
    if protect_line_magic not in transforms:
        transforms.append(protect_line_magic)
    from flue_nb.notebook.magics._warm import warm_up

    magics = ipython.magics_manager.registry.get("FlueMagics")
    warm_up(getattr(magics, "model", "") or "")  # the first cell's imports, off the main path
    from flue_nb.notebook.chat._frontend import watch

    watch()  # a frontend that draws widgets says so when it connects: cells then draw the chat
    from flue_nb.notebook.cells.log import install

    install(ipython)  # the cell log the notebook tools read: every cell from now on
    from flue_nb.notebook.magics._shutdown import on_frontend_shutdown, on_idle_interrupt

    kernel = getattr(ipython, "kernel", None)
    on_frontend_shutdown(kernel, lambda: _open_sessions(magics))
    on_idle_interrupt(kernel, lambda: _open_sessions(magics))


def _open_sessions(magics: FlueMagics | None) -> list[Session]:
    """The sessions this kernel talks to: its cells' and its chats' (to abort at shutdown)."""
    found = [session for _agent, session in magics._agents.values()] if magics is not None else []
    try:
        from flue_nb.notebook.chat.widget import open_widgets
    except ImportError:  # no `widget` extra: only the cells' sessions
        return found
    return found + [w.session for w in open_widgets()]


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """Remove the `%flue` magics."""
    for kind in ("line", "cell"):
        ipython.magics_manager.magics[kind].pop("flue", None)
    ipython.magics_manager.registry.pop("FlueMagics", None)
    from flue_nb.notebook.cells.log import uninstall

    uninstall(ipython)
    transforms = ipython.input_transformer_manager.line_transforms
    if protect_line_magic in transforms:
        transforms.remove(protect_line_magic)
