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
    from flue_nb.runtime.policy import current_policy

    current_policy()  # the hub policy is read now, at load; a bad file fails here, loudly
    if "flue" not in ipython.magics_manager.magics["line"]:
        ipython.register_magics(FlueMagics)
    transforms = ipython.input_transformer_manager.line_transforms
    if protect_line_magic not in transforms:
        transforms.append(protect_line_magic)
    from flue_nb.notebook.magics._warm import warm_up

    magics = ipython.magics_manager.registry.get("FlueMagics")
    warm_up(getattr(magics, "model", "") or "")  # the first cell's imports, off the main path
    from flue_nb.notebook.views.chat.frontend import watch

    watch()  # a frontend that draws widgets says so when it connects: cells then draw the chat
    from flue_nb.notebook.celllog.log import install

    install(ipython)  # the cell log the notebook tools read: every cell from now on
    from flue_nb.notebook.magics._shutdown import on_frontend_shutdown, on_idle_interrupt
    from flue_nb.runtime.materializer import use_materializer

    use_materializer(_materialize)  # session.materialize(...) writes into this kernel's notebook
    kernel = getattr(ipython, "kernel", None)
    on_frontend_shutdown(kernel, lambda: _open_sessions(magics))
    on_idle_interrupt(kernel, lambda: _open_sessions(magics))


def _materialize(store: object, conversation_id: str, submission_id: str | None) -> object:
    """`Session.materialize` in a kernel: the live document if there is one, else shown."""
    from IPython import get_ipython

    from flue_nb.notebook.document.saved import find_document
    from flue_nb.notebook.verify.materialize import materialize
    from flue_nb.runtime.coordinator import coordinator

    shell = get_ipython()
    namespace = shell.user_ns if shell is not None else {}

    async def go() -> object:
        return await materialize(store, conversation_id, submission_id, await find_document(namespace))

    co = coordinator()
    return co.wait(co.submit(go()), timeout=60)


def _open_sessions(magics: FlueMagics | None) -> list[Session]:
    """The sessions this kernel talks to: its cells' and its chats' (to abort at shutdown)."""
    found = [session for _agent, session in magics._agents.values()] if magics is not None else []
    try:
        from flue_nb.notebook.views.chat.widget import open_widgets
    except ImportError:  # no `widget` extra: only the cells' sessions
        return found
    return found + [w.session for w in open_widgets()]


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """Remove the `%flue` magics."""
    for kind in ("line", "cell"):
        ipython.magics_manager.magics[kind].pop("flue", None)
    ipython.magics_manager.registry.pop("FlueMagics", None)
    from flue_nb.notebook.celllog.log import uninstall

    uninstall(ipython)
    transforms = ipython.input_transformer_manager.line_transforms
    if protect_line_magic in transforms:
        transforms.remove(protect_line_magic)
