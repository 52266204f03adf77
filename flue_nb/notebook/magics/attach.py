"""An outside `flue-nb acp` attached to this kernel: the kernel's side of `--kernel`/`--notebook`.

The ACP process runs the conversation; this kernel lends it two things. Its tools: `attach()`
serves them over MCP (`%flue serve`, loopback, a fresh token) so the agent's `python` runs in
this namespace and its notebook and file tools act here. And its conversation: the one this
kernel's `%flue` cells continue, in the same store, so a `%flue chat` here follows the ACP turns
as it follows another kernel's, and answers their approvals through the store's ballot. The
served tools run under `allow`: the ACP side asks (its client, and this kernel's chat through
the ballot) before it calls one that changes something, so a call is never asked about twice.
The ACP process calls `attach()` through the kernel's shell channel and `detach()` when it ends.

An agent this kernel hosts (`%flue chat --agent acp:...`) is not flue_nb and may call without
asking: it attaches with a `gate`, and gets a token of its own whose every call passes that gate
(flue_nb's approval, `acp.kernel_calls`) before it runs.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from typing import TYPE_CHECKING, Any

from flue_nb.notebook.document.identity import default_conversation_id
from flue_nb.runtime.errors import ConfigError

if TYPE_CHECKING:
    from flue_nb.notebook.serve import Gate, Served

__all__ = ["CALLS_SUFFIX", "attach", "attachments", "detach"]

CALLS_SUFFIX = ":acp-calls"
"""The conversation (the attached one's id plus this) where the served calls are recorded as they
ran in this kernel, beside the conversation that asked for them."""

_lock = threading.Lock()
_served: Served | None = None
"""The server `attach()` started (None: none, or it serves through the user's `%flue serve`)."""
_attached: dict[str, str | None] = {}
"""Attachment id -> the token granted to it alone (None: it uses the server's own)."""


def attachments() -> int:
    """How many ACP processes are attached now."""
    with _lock:
        return len(_attached)


def attach(
    client: str = "flue-nb acp",
    *,
    conversation: str | None = None,
    gate: Gate | None = None,
) -> str:
    """Serve this kernel's tools to an ACP process and say, as JSON, where it works: the
    conversation (`conversation`: this kernel's cells' unless given), its store (`db`), the
    working directory (`cwd`), the MCP endpoint (`url`, `token`) and this attachment's id
    (`attachment`). The first attachment's conversation names the server's record of the calls.
    With `gate`, the token is this attachment's own, and each call made with it runs only if
    `gate(tool, arguments)` returns None (else it is refused with what it returned)."""
    global _served
    from flue_nb import __version__
    from flue_nb.notebook import serve as served_mod
    from flue_nb.runtime.store.url import is_postgres_url

    magics = _magics()
    cid = conversation or (magics.conversation_id if magics is not None else default_conversation_id())
    db = (getattr(magics, "db", "") or os.environ.get("FLUE_DB") or "").strip() or None
    if db == ":memory:":
        raise ConfigError(
            "this kernel keeps its conversations in memory (`db=':memory:'`), which no other process "
            "can share: set `%config FlueMagics.db` to a file (or unset it) to attach"
        )
    store = (
        db if db is not None and is_postgres_url(db) else os.path.abspath(db or os.path.join(".flue", "flue.sqlite"))
    )
    with _lock:
        running = served_mod.current()
        if running is not None and running is not _served and running.approval != "allow":
            raise ConfigError(
                f"this kernel already serves over MCP at {running.url} with approval {running.approval} "
                "(`%flue serve`): its calls would be asked about twice. `%flue serve stop` first, or serve "
                "with `--approval allow`: the attached agent asks before each call that changes something"
            )
        if running is None:
            _served = running = served_mod.serve(
                approval="allow",
                conversation=cid + CALLS_SUFFIX,
                db=db,
                on_session=_register(magics, db),
                shown_in=cid,
                **(magics._containment() if magics is not None else {}),
            )
        attachment = uuid.uuid4().hex[:12]
        own = running.grant(gate) if gate is not None else None
        _attached[attachment] = own
    return json.dumps(
        {
            "attachment": attachment,
            "client": client,
            "conversation": cid,
            "db": store,
            "cwd": os.getcwd(),
            "url": running.url,
            "token": own or running.token,
            "notebook": os.environ.get("JPY_SESSION_NAME", ""),
            "flue_nb": __version__,
        }
    )


def detach(attachment: str) -> bool:
    """End an attachment (its own token no longer admitted); the server `attach()` started
    stops with the last one. True if it was one."""
    global _served
    from flue_nb.notebook import serve as served_mod

    with _lock:
        if attachment not in _attached:
            return False
        own = _attached.pop(attachment)
        running = served_mod.current()
        if own is not None and running is not None:
            running.revoke(own)
        if not _attached and _served is not None:
            _served.stop()
            _served = None
    return True


def _magics() -> Any:
    """This kernel's `FlueMagics`, when `%load_ext flue_nb` ran (None: the defaults apply)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell.magics_manager.registry.get("FlueMagics") if shell is not None else None


def _register(magics: Any, db: str | None) -> Any:
    """`%flue chat -c <conversation>:acp-calls` shows the served calls with their agent."""
    if magics is None:
        return None

    def register(cid: str, agent: Any, session: Any) -> None:
        key = magics._key(cid, db)  # as `%flue chat -c` looks it up
        magics._agents[key] = (agent, session)
        magics._labels[key] = "attached flue-nb acp"

    return register
