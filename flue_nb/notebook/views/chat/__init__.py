"""The chat widget: `%flue chat`, `flue_nb.chat()`, and the view a `%%flue` cell shows.

anywidget and ipywidgets are ordinary dependencies of flue_nb; `available()` says whether they
can be found (a broken environment may lack them) without importing them.
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flue_nb.notebook.views.chat.widget import ChatWidget
    from flue_nb.runtime.agent import AgentDef

__all__ = ["available", "cell", "chat", "frontend", "saved_copy", "widget", "wire"]


def available() -> bool:
    """Whether anywidget is installed (it is a dependency; a damaged environment may lack it)."""
    return importlib.util.find_spec("anywidget") is not None


def chat(
    agent: AgentDef | None = None,
    *,
    conversation: str | None = None,
    db: str | os.PathLike[str] | None = None,
    model: str | None = None,
) -> ChatWidget:
    """Open a conversation as a chat widget; display it (it is the cell's value when last).

    Args:
        agent: An `@agent` function; None means the notebook assistant that `%flue` uses.
        conversation: The conversation id; None continues the notebook's own (as `%flue` does).
        db: The store (default `.flue/flue.sqlite` in the working directory).
        model: For the notebook assistant: a model spec (default `$FLUE_MODEL`).

    Raises:
        ImportError: anywidget is missing from this environment (reinstall it).
    """
    if not available():
        raise ImportError(
            "anywidget cannot be imported in this environment, though flue_nb depends on it: "
            "reinstall it with `pip install --force-reinstall anywidget ipywidgets`"
        )
    from flue_nb.notebook.document.identity import default_conversation_id
    from flue_nb.notebook.views.chat.widget import ChatWidget
    from flue_nb.runtime.session import init

    label = ""
    if agent is None:
        from flue_nb.notebook.kernel.assistant import make_assistant, resolve_spec

        setting = model or os.environ.get("FLUE_MODEL", "")
        spec = resolve_spec(setting, _user_ns())
        label = spec if isinstance(spec, str) else setting
        agent = make_assistant(spec)
    session = init(agent, conversation=conversation or default_conversation_id(), db=db)
    return ChatWidget(session, model=label)


def _user_ns() -> dict[str, Any]:
    try:
        from IPython import get_ipython
    except ImportError:
        return {}
    shell = get_ipython()
    return shell.user_ns if shell is not None else {}
