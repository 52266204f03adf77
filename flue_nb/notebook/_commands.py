"""Subcommands that don't need the magic's state: `compact`, `help`, and reading a store directly.

A store is read directly when no agent can be chosen (no model configured): opening a session
would start recovering interrupted work with whatever agent opened it, and looking must not.
"""

from __future__ import annotations

import os
from typing import Any

from IPython.display import display

from flue_nb.notebook._line import FlueCellError
from flue_nb.notebook.display import TextView

__all__ = ["compact", "help_view", "mcp_view", "store_command"]


def compact(session: Any) -> None:
    """`%flue compact`: fold older messages into a summary now."""
    from flue_nb.runtime.errors import FlueError

    before = session.status().get("used_tokens")
    try:
        session.compact()
    except FlueError as exc:
        raise FlueCellError(f"flue: could not compact: {exc.message}") from None
    after = session.status().get("used_tokens")
    done = f": {before} → {after} tokens" if before is not None else ""
    print(f"flue: compacted the context{done}")


def help_view(parser: Any) -> TextView:
    """`%flue help`: subcommands, settings and every option."""
    text = (
        "%flue MESSAGE  ·  %%flue [options] + message body  ·  %flue SUBCOMMAND\n\n"
        "Subcommands: chat (widget; plain text for now), status, history, abort, compact, "
        "mcp (MCP servers and their tools), use AGENT (or `use assistant`), help.\n"
        "Settings: c.FlueMagics.model / $FLUE_MODEL, c.FlueMagics.db, c.FlueMagics.approval, "
        "c.FlueMagics.lease_ttl.\n\n" + parser.format_help()
    )
    return TextView(text, f"```\n{text}\n```")


def mcp_view() -> TextView:
    """`%flue mcp`: the MCP servers this kernel connected to (or failed to), with their tools."""
    from flue_nb.runtime.tools.mcp import mcp_servers

    servers = mcp_servers()
    if not servers:
        text = (
            "flue: no MCP servers in this kernel yet. Declare one in an agent with "
            "flue.use_mcp(NAME, command=[...]) or flue.use_mcp(NAME, url=...); it connects at "
            "the agent's next prompt."
        )
        return TextView(text)
    plain, md = ["MCP servers in this kernel:"], ["**MCP servers in this kernel**", ""]
    for s in servers:
        plain.append(f"- {s.name} ({s.state}): {s.target}")
        md.append(f"- `{s.name}` ({s.state}): `{s.target}`")
        if s.tools:
            plain.append("    tools: " + ", ".join(s.tools))
            md.append("  - tools: " + ", ".join(f"`{t}`" for t in s.tools))
        if s.error and s.state != "connected":
            reason = s.error.splitlines()[0]
            plain.append(f"    error: {reason}")
            md.append(f"  - error: {reason}")
    return TextView("\n".join(plain), "\n".join(md))


def store_command(name: str, conversation_id: str, path: str) -> None:
    """`history`, `status` or `abort` from the store alone (no agent, no session).

    `path` is an SQLite file or a `postgresql://` URL (shown with its password masked).
    """
    from flue_nb.notebook.assistant import NO_MODEL_HELP
    from flue_nb.notebook.history import from_store

    if name == "compact":
        raise FlueCellError(NO_MODEL_HELP)
    from flue_nb.runtime.store._url import is_postgres_url, mask_url, open_any

    label = mask_url(path) if is_postgres_url(path) else path
    if not is_postgres_url(path) and (path == ":memory:" or not os.path.exists(path)):
        print(f"flue: conversation `{conversation_id}` has nothing stored yet ({path})")
        return
    store = open_any(path, cwd=os.getcwd())
    try:
        shown = from_store(name, store, conversation_id, store_label=label)
    finally:
        store.close()
    if isinstance(shown, str):
        print(shown)
    else:
        display(shown)
