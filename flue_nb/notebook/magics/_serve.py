"""`%flue serve [options]`, `%flue serve status`, `%flue serve stop`: the line magic's side."""

from __future__ import annotations

import argparse
import shlex
import time
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from flue_nb.runtime.errors import ConfigError

if TYPE_CHECKING:
    from flue_nb.runtime.agent import AgentDef
    from flue_nb.runtime.session import Session

__all__ = ["serve_command"]

USAGE = (
    "%flue serve [--port N] [--host H] [--approval allow|ask|deny] [--tools A,B] [-c ID] "
    "[--busy-timeout S] | %flue serve status | %flue serve stop"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # a usage line in the cell, never SystemExit
        raise UsageError(f"{message}\nusage: {USAGE}")


def _parser() -> _Parser:
    p = _Parser(prog="%flue serve", add_help=False)
    p.add_argument("action", nargs="?", choices=["status", "stop"])
    p.add_argument("--port", type=int)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--approval", choices=["allow", "ask", "deny"])
    p.add_argument("--tools")
    p.add_argument("-c", "--conversation")
    p.add_argument("--db")
    p.add_argument("--busy-timeout", type=float)
    return p


def serve_command(magics: Any, line: str) -> None:
    """Run `%flue serve ...` for the `FlueMagics` instance `magics`."""
    from flue_nb.notebook import serve as served_mod

    try:
        args = _parser().parse_args(shlex.split(line))
    except ValueError as exc:
        raise UsageError(f"{exc}\nusage: {USAGE}") from None
    if args.action == "stop":
        running = served_mod.current()
        if running is None:
            print("flue: no MCP server is running in this kernel")
            return
        running.stop()
        print(f"flue: stopped serving {running.url}; the calls stay recorded in their conversations")
        return
    if args.action == "status":
        running = served_mod.current()
        print(_status(running) if running is not None else "flue: no MCP server is running (`%flue serve` starts one)")
        return
    running = served_mod.current()
    if running is not None:
        print(f"flue: already serving; {_status(running)}\n`%flue serve stop` first to start another")
        return
    db = args.db or magics.db or None
    tools = [t.strip() for t in args.tools.split(",") if t.strip()] if args.tools else None

    def register(cid: str, agent: AgentDef, session: Session) -> None:
        # A `%flue chat -c mcp:<client>` then shows this conversation with its own agent.
        key = magics._key(cid, db)
        magics._agents[key] = (agent, session)
        magics._labels[key] = "outside MCP client"

    try:
        served = served_mod.serve(
            port=args.port,
            host=args.host,
            approval=args.approval or magics.approval,
            tools=tools,
            conversation=args.conversation,
            db=db,
            busy_timeout=args.busy_timeout or served_mod.DEFAULT_BUSY_TIMEOUT,
            approval_timeout=magics.approval_timeout or None,
            on_session=register,
            **magics._containment(),
        )
    except ConfigError as exc:
        raise UsageError(exc.message) from None
    where = f"conversation `{args.conversation}`" if args.conversation else "conversation `mcp:<client name>`"
    print(
        f"flue: serving this kernel over MCP at {served.url}\n"
        f"  tools: {', '.join(served.status().tools)}\n"
        f"  approval: {served.approval}; every call is recorded in {where} "
        f"(`%flue chat -c ...` to watch and stop it)\n"
        f"  token (shown once): {served.token}\n\n"
        f"{served.client_config()}\n\n"
        "`%flue serve status` tells how it goes, `%flue serve stop` ends it; restarting the kernel ends it too."
    )


def _status(served: Any) -> str:
    s = served.status()
    since = time.strftime("%H:%M:%S", time.localtime(s.started_at))
    conversations = ", ".join(f"`{c}`" for c in s.conversations) or "none yet"
    return (
        f"serving {s.url} since {since}: {s.calls} call(s), approval {s.approval}, "
        f"tools {', '.join(s.tools)}; recorded in {conversations}"
    )
