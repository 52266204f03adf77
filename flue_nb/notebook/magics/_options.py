"""The `%%flue` cell options (argparse, through IPython's `magic_arguments`), declared as one table.

`%flue help` lists them from the parser they make; `flue.py` applies them to the magic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from IPython.core.magic_arguments import argument, magic_arguments

__all__ = ["OPTIONS", "cell_options"]


def _option(*flags: str, **kwargs: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, kwargs


OPTIONS = (
    _option(
        "-a",
        "--agent",
        metavar="NAME",
        help="An @agent function in the namespace to talk to (this conversation keeps it), or "
        '"acp:COMMAND" for an external ACP agent started with COMMAND.',
    ),
    _option(
        "-c",
        "--conversation",
        metavar="ID",
        help="Switch to conversation ID (later cells continue it).",
    ),
    _option("--new", action="store_true", help="Start a fresh conversation (later cells continue it)."),
    _option(
        "-m",
        "--model",
        metavar="SPEC",
        help="Model for the default assistant, for this cell: anthropic/<id>, openai/<model>, "
        "azure/<deployment>, bedrock/<id>, vertex/<id> (`:` works for `/`), or the name of a "
        "Model object in the namespace.",
    ),
    _option(
        "--db",
        metavar="PATH",
        help="Store for this cell: an SQLite path or a postgresql:// URL (default: "
        "c.FlueMagics.db, else $FLUE_DB, else .flue/flue.sqlite).",
    ),
    _option(
        "--approval",
        choices=["allow", "ask", "deny"],
        help="Approval for the assistant's tools that change something, for this cell.",
    ),
    _option(
        "--no-widget",
        action="store_true",
        help="Plain text/markdown output instead of the chat widget.",
    ),
    _option("--background", action="store_true", help="Return at once; the output keeps updating."),
    _option(
        "--max-turns",
        type=int,
        metavar="N",
        help="At most N model calls for this message (default: the agent's max_turns, 100); "
        "then it fails with turn_limit_exceeded.",
    ),
    _option(
        "--max-cost",
        type=float,
        metavar="USD",
        help="At most USD dollars (list prices) for this message, subagents included (default: "
        "FlueMagics.max_cost_usd); it stops before the model call that would pass it, with budget_exceeded.",
    ),
    _option(
        "--attach",
        metavar="NAME[,NAME]",
        help="Attach images to the message: figures or images named in the namespace, or image "
        "files (PNG, JPEG, GIF, WebP) by path.",
    ),
    _option(
        "--last",
        type=int,
        metavar="N",
        help="For `history`: the last N submissions (default 20; 0 shows them all).",
    ),
    _option(
        "--interpolate",
        action="store_true",
        help="Expand {expr} and $name in the message from the namespace.",
    ),
    _option(
        "message",
        nargs="*",
        help="The message, or a subcommand: chat, status, history, abort, compact, mcp, serve, use, help.",
    ),
)
"""Each option's flags and `add_argument` keywords, in the order `%flue help` lists them."""


def cell_options(fn: Callable[..., Any]) -> Any:
    """`fn` with the options, parsed by IPython's `magic_arguments` (untyped: it gives `fn` a
    `.parser`, which `%flue help` reads)."""
    for flags, kwargs in reversed(OPTIONS):
        fn = argument(*flags, **kwargs)(fn)
    return magic_arguments()(fn)
