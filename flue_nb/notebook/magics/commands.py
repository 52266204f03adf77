"""Subcommands that don't need the magic's state: `compact`, `help`, and reading a store directly.

A store is read directly when no agent can be chosen (no model configured): opening a session
would start recovering interrupted work with whatever agent opened it, and looking must not.
"""

from __future__ import annotations

import os
import re
from argparse import ArgumentParser
from typing import TYPE_CHECKING

from IPython.display import display

from flue_nb.notebook.magics._line import FlueCellError
from flue_nb.notebook.views.transcript import TextView

if TYPE_CHECKING:
    from flue_nb.runtime.session import Session, StoredConversation
    from flue_nb.runtime.store import Submission

__all__ = ["HISTORY_LAST", "compact", "help_view", "history_with_outcomes", "mcp_view", "store_command"]


def compact(session: Session) -> None:
    """`%flue compact`: fold older messages into a summary now, and say what changed."""
    from flue_nb.runtime.errors import FlueError

    try:
        done = session.compact()
    except FlueError as exc:
        raise FlueCellError(f"flue: could not compact: {exc.message}") from None
    if done is None:
        print(
            "flue: nothing to fold: everything but an earlier summary (if any) is within the "
            "recent part that compaction keeps verbatim; no model call was made"
        )
        return
    print(
        f"flue: compacted the context: {done.messages_before} → {done.messages_after} "
        f"messages, {done.tokens_before:,} → {done.tokens_after:,} tokens"
    )


_HELP_INTRO = [
    ("%flue MESSAGE", "one line is one message to the agent"),
    ("%%flue [options]", "the cell body is the message"),
    (
        "%flue SUBCOMMAND",
        "status, history, abort, compact, use AGENT (or `use assistant`), mcp, chat (the chat widget), help",
    ),
    (
        "%flue changes [SUBMISSION]",
        "what a run's tool calls changed (variables, files, cells), as STEP.ITEM; "
        "`%flue undo [ITEM|all] [--force]`, `%flue rewind STEP [--force]` take them back",
    ),
    (
        "%flue verify [--timeout S]",
        "rerun the saved notebook in a fresh kernel (%%flue cells replay their stored answers) and compare it "
        "with this kernel: what differs, and which agent step or cell made it so",
    ),
    ("%flue materialize [SUBMISSION]", "write the agent's state-changing python calls into the notebook as cells"),
    (
        "%flue eval DATASET --model MODEL",
        "run a dataset of notebook tasks, each case in a fresh kernel (flue_nb.evals): the score, a table and "
        "each case's drill-down; `%flue eval show CASE`",
    ),
    ("%flue -- MESSAGE", "send a message that starts like a subcommand or an option"),
]
_HELP_SETTINGS = (
    "c.FlueMagics.model (or $FLUE_MODEL), c.FlueMagics.db (or $FLUE_DB), c.FlueMagics.approval, "
    "c.FlueMagics.approval_timeout, c.FlueMagics.sandbox, c.FlueMagics.allow_hosts, "
    "c.FlueMagics.hide_paths, c.FlueMagics.python_tool, c.FlueMagics.widget, c.FlueMagics.lease_ttl"
)


def help_view(parser: ArgumentParser) -> TextView:
    """`%flue help`: usage, subcommands, settings and every option.

    Markdown prose rather than argparse's fixed-width text: a front end wraps it at word
    boundaries, where a preformatted block of 80-column lines wraps mid-word in a narrow panel.
    """
    import textwrap

    options = []
    for action in parser._actions:  # argparse keeps no public list of its options
        if not action.option_strings or action.help in (None, "==SUPPRESS=="):
            continue
        metavar = f" {action.metavar}" if action.metavar else ""
        if action.choices:
            metavar = " " + "|".join(action.choices)
        flags = ", ".join(f"{o}{metavar}" for o in action.option_strings)
        options.append((flags, action.help))
    plain = ["flue: talk to the agent working in this kernel", ""]
    md = ["**flue**: talk to the agent working in this kernel", ""]
    for usage, what in _HELP_INTRO:
        plain.extend(textwrap.wrap(f"{usage}: {what}", 88, subsequent_indent="    "))
        md.append(f"- `{usage}`: {_md(what)}")
    plain += ["", "Options:"]
    md += ["", "**Options**", ""]
    for flags, what in options:
        plain.append(f"  {flags}")
        plain.extend(textwrap.wrap(what, 84, initial_indent="      ", subsequent_indent="      "))
        md.append(f"- `{flags}`: {_md(what)}")
    plain += ["", *textwrap.wrap(f"Settings: {_HELP_SETTINGS}.", 88)]
    md += ["", f"**Settings**: {_settings_md()}."]
    return TextView("\n".join(plain), "\n".join(md))


def _settings_md() -> str:
    """The settings as code spans: a front end's math typesetter leaves `$FLUE_MODEL` alone there
    (between two `$` signs outside code, the text is drawn as LaTeX, issue 19.8)."""
    return re.sub(r"(c\.FlueMagics\.\w+|\$\w+)", r"`\1`", _HELP_SETTINGS)


def _md(text: str) -> str:
    # `<id>` would be read as an HTML tag and `$name` as the start of LaTeX in a front end.
    return re.sub(r"(\$\w+)", r"`\1`", text.replace("<", "&lt;"))


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


HISTORY_LAST = 20
"""How many submissions `%flue history` and `flue-nb history` show unless told (`--last N`)."""


def history_with_outcomes(
    stored: Session | StoredConversation, *, embed: bool = True, last: int | None = HISTORY_LAST, how: str = ""
) -> TextView:
    """`%flue history`: the conversation from the store, each turn marked with how it ended
    when that was not plainly completed (aborted, failed, recovered after a kernel died).
    `embed`: figures as images in the markdown (False where only the text is read). `last`: the
    newest `last` submissions only (None or 0: all), with a first line saying how many earlier
    ones were left out and `how` to see them."""
    from flue_nb.notebook.views.history import earlier_note, history_view

    turns = stored.turns(last or None)
    summaries = getattr(stored, "summaries", None)  # a session knows its agent's tools; the store alone does not
    if not turns:
        return history_view(stored.conversation_id, [])
    plain: list[str] = []
    md: list[str] = []
    first = next((t.submission for t in turns if t.submission is not None), None)
    left_out = stored.store.count_submissions(stored.conversation_id, before_seq=first.seq) if last and first else 0
    if left_out:
        note = earlier_note(left_out, how or f"`%flue history --last {(last or 0) + left_out}` shows them all")
        plain.append(note)
        md.append(f"*{note}*")
    for turn in turns:
        view = history_view(stored.conversation_id, turn.messages, embed=embed, summaries=summaries)
        plain.append(view.plain)
        md.append(view.md)
        for mark in _marks(turn.submission, turn.recovered):
            plain.append(f"  [{mark}]")
            md.append(f"> *[{mark}]*")
    return TextView(
        "\n".join(plain),
        "\n\n".join(md),
        {"conversation_id": stored.conversation_id, "messages": sum(len(t.messages) for t in turns)},
    )


def _marks(sub: Submission | None, recovered: bool) -> list[str]:
    marks = ["recovered after its kernel stopped mid-run"] if recovered else []
    if sub is None or sub.joined_into:
        return marks
    if sub.outcome is None:
        marks.append(f"{sub.state.value}…")
    elif sub.outcome.value != "completed":
        why = (sub.error or {}).get("message", "")
        marks.append(f"{sub.outcome.value}: {why}" if why else sub.outcome.value)
    return marks


def store_command(name: str, conversation_id: str, path: str, *, last: int | None = HISTORY_LAST) -> None:
    """`history`, `status` or `abort` from the store alone (no agent, no session).

    `path` is an SQLite file or a `postgresql://` URL (shown with its password masked).
    """
    from flue_nb.notebook.kernel.assistant import NO_MODEL_HELP
    from flue_nb.notebook.views.history import from_store

    if name == "compact":
        raise FlueCellError(NO_MODEL_HELP)
    from flue_nb.runtime.store.url import is_postgres_url, mask_url, open_any

    label = mask_url(path) if is_postgres_url(path) else path
    if not is_postgres_url(path) and (path == ":memory:" or not os.path.exists(path)):
        print(f"flue: conversation `{conversation_id}` has nothing stored yet ({path})")
        return
    store = open_any(path, cwd=os.getcwd())
    try:
        from flue_nb.runtime.session import StoredConversation

        stored = StoredConversation(store, conversation_id)
        if name == "history":
            shown: TextView | str = history_with_outcomes(stored, last=last)
        else:
            shown = from_store(name, stored, store_label=label)
    finally:
        store.close()
    if isinstance(shown, str):
        print(shown)
    else:
        display(shown)
