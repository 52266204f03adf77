"""The `%flue` and `%%flue` magics: one line or one cell is one message to the agent.

The runtime runs on its own loop (the coordinator thread); a blocking cell waits on its
submission's future, and a `--background` cell returns at once while its output keeps updating.
Consecutive cells continue one conversation per notebook: its default id comes from the notebook
path (`JPY_SESSION_NAME`), so a restarted kernel reopens it and recovers what was interrupted.
The agent a conversation talks to is sticky: the last `--agent NAME` or `%flue use NAME` stays
until changed, and is kept in the store so a restarted kernel remembers it.
"""

from __future__ import annotations

import contextlib
import os
import re
from argparse import Namespace
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class, no_var_expand
from IPython.display import display

from flue_nb.notebook.magics._conversations import ACP_PREFIX, ConversationMagics
from flue_nb.notebook.magics._effects import (
    EFFECT_COMMANDS,
    effects_command,
    install_targets,
    recover_note,
    split_args,
)
from flue_nb.notebook.magics._line import (
    SUBCOMMANDS,
    TAKES_ARGUMENT,
    FlueCellError,
    protect_line_magic,
    split_line,
)
from flue_nb.notebook.magics._options import cell_options
from flue_nb.notebook.magics.commands import (
    HISTORY_LAST,
    compact,
    help_view,
    history_with_outcomes,
    mcp_view,
    store_command,
)
from flue_nb.runtime.store.url import mask_url, store_key
from flue_nb.runtime.text import clean

if TYPE_CHECKING:
    from flue_nb.runtime.agent import AgentDef
    from flue_nb.runtime.messages import ImagePart
    from flue_nb.runtime.session import Session

__all__ = [
    "FlueCellError",
    "FlueMagics",
    "protect_line_magic",
    "split_line",
]

NO_WIDGET_EXTRA = (
    "anywidget cannot be imported in this environment, though flue_nb depends on it: "
    "reinstall it with `pip install --force-reinstall anywidget ipywidgets`"
)


@magics_class
class FlueMagics(ConversationMagics):
    """`%flue MESSAGE`, `%%flue [options]` + a message, and `%flue <subcommand>`."""

    # --- the magic ----------------------------------------------------------------------------

    @cell_options
    @no_var_expand
    @line_cell_magic
    def flue(self, line: str = "", cell: str | None = None) -> Any:
        """Talk to the agent working in this kernel: `%flue MESSAGE` or a `%%flue` cell."""
        argv, rest = split_line(line)
        words = rest.split()
        more_argv, arg = split_line(rest[len(words[0]) :]) if words else ([], "")
        # `--` before the message makes it a message whatever its first word.
        head = line.rstrip()[: len(line.rstrip()) - len(rest)]
        escaped = re.search(r"(^|\s)--\s*$", head) is not None
        if words and not escaped and cell is None and words[0] in EFFECT_COMMANDS:
            more_argv, arg, force = split_args(rest[len(words[0]) :])
            args = self._parse(argv + more_argv)
            with _store_failures():
                agent = self._agent_for_view(args)
                session = self._session(args, agent=agent) if agent is not None else None
                if session is None:
                    raise UsageError(
                        f"`%flue {words[0]}` needs a model to open the conversation (set c.FlueMagics.model)"
                    )
                return effects_command(words[0], arg.strip(), force, session, self.shell)
        if words and words[0] == "serve" and not escaped and cell is None:
            from flue_nb.notebook.magics._serve import serve_command

            return serve_command(self, rest[len("serve") :])
        if words and words[0] == "eval" and not escaped and cell is None:
            from flue_nb.notebook.magics._eval import eval_command

            return eval_command(self, rest[len("eval") :])
        if words and words[0] in ("verify", "materialize") and not escaped and cell is None:
            from flue_nb.notebook.magics import _verify

            command = _verify.verify_command if words[0] == "verify" else _verify.materialize_command
            with _store_failures():  # options before the subcommand count as those after it
                return command(self, f"{head} {rest[len(words[0]) :]}")
        # A subcommand is the whole line ("status of the data?" is a message); `use` always is
        # the subcommand, so `%flue use a b` is a usage error rather than a message to the model.
        if words and not escaped and words[0] in SUBCOMMANDS and (not arg or words[0] in TAKES_ARGUMENT):
            args = self._parse(argv + more_argv)
            if cell is not None and words[0] != "chat":
                raise UsageError(f"`%%flue {words[0]}` takes no cell body; use the line magic `%flue {words[0]}`")
            with _store_failures():
                return self._subcommand(words[0], arg, args, cell)
        args = self._parse(argv)
        if cell is not None:
            if rest:
                raise UsageError("`%%flue` takes options on its first line; put the message in the cell body")
            message = cell.strip()
        else:
            message = rest
        if not message.strip():
            raise UsageError("nothing to send: `%flue MESSAGE`, or a `%%flue` cell with the message as its body")
        with _store_failures():
            return self._send(message, args)

    def _parse(self, argv: list[str]) -> Namespace:
        parser = self.flue.parser
        try:
            args: Namespace = parser.parse_args(argv)
        except UsageError as exc:  # shown without a traceback; add the usage line argparse omits
            usage = " ".join(parser.format_usage().replace("::", "").split())
            raise UsageError(f"{exc}\nusage: {usage}") from None
        if args.model and args.agent:
            raise UsageError("`-m` sets the default assistant's model; an `--agent` chooses its own with use_model()")
        return args

    # --- sending ------------------------------------------------------------------------------

    def _send(self, message: str, args: Namespace) -> None:
        if args.interpolate:
            message = self._interpolate(message)
        from flue_nb.notebook.verify import replay

        if replay.active():  # a rerun for `verify`: the stored answer, never the model
            try:
                return replay.answer(message)
            except replay.ReplayError as exc:
                raise FlueCellError(str(exc)) from None
        images = self._attachments(args.attach) if getattr(args, "attach", None) else []
        agent, label, session = self._open(args)
        install_targets(self.shell)
        recover_note(session)  # an undo or rewind a crash cut off is finished, and said, first
        from flue_nb.notebook.magics.run import run_message

        run_message(
            session,
            message,
            agent=agent.name,
            model=label,
            background=args.background,
            opened_at=self.opened_at,
            widget=self._draws_widget(args),
            stream=None if self.live == "auto" else self.live == "always",
            images=images,
            max_turns=args.max_turns,
            max_cost_usd=args.max_cost if args.max_cost is not None else (self.max_cost_usd or None),
        )

    def _open(self, args: Namespace) -> tuple[AgentDef, str, Session]:
        """The agent, its model label and the session a message of this cell goes to."""
        from flue_nb.runtime.errors import FlueError

        served = self._agents.get(self._key(self._conversation(args), self._db(args)))
        if served is not None and served[0].name == "mcp-client" and not (args.agent or args.model):
            agent, label = served[0], "outside MCP client"  # `%flue serve` records its calls here
        else:
            agent, label = self._agent(args)
        try:
            session = self._session(args, agent=agent, label=label)
            if args.agent:  # as explicit as `%flue use`: later cells and subcommands keep it
                self._choose(session.conversation_id, self._db(args), args.agent)
        except FlueError as exc:
            raise FlueCellError(f"flue: could not open conversation `{self.conversation_id}`: {exc.message}") from None
        return agent, label, session

    def _attachments(self, spec: str) -> list[ImagePart]:
        """`--attach a,b`: each name is a variable (figure, image, bytes, path) or an image file."""
        from flue_nb.runtime.errors import ConfigError
        from flue_nb.runtime.images import image_from_object

        out = []
        for name in (n.strip() for n in spec.split(",")):
            if not name:
                continue
            if name in self._ns:
                obj = self._ns[name]
            elif os.path.isfile(name):
                obj = name
            else:
                raise UsageError(f"--attach: `{name}` is neither a variable nor an image file here")
            try:
                out.append(image_from_object(obj, label=name))
            except ConfigError as exc:
                raise UsageError(f"--attach: {exc.message}") from None
        return out

    def _draws_widget(self, args: Namespace) -> bool:
        """Whether this cell shows the chat view (with the text transcript as its fallback)."""
        if args.no_widget or self.widget == "never":
            return False
        from flue_nb.notebook.views.chat import available

        if not available():
            return False
        from flue_nb.notebook.views.chat.frontend import renders_widgets

        return self.widget == "always" or renders_widgets()

    def _chat(self, args: Namespace, cell: str | None) -> bool:
        """`%flue chat`: open the chat widget; False (after saying why) to show text instead."""
        from flue_nb.notebook.views.chat import available

        if args.no_widget or not available():
            why = "--no-widget" if args.no_widget else NO_WIDGET_EXTRA
            print(f"flue: showing this conversation as text ({why})")
            return False
        _agent, label, session = self._open(args)
        from flue_nb.notebook.views.chat.saved_copy import SavedCopy
        from flue_nb.notebook.views.chat.widget import ChatWidget

        key = self._key(session.conversation_id, self._db(args))
        chat = ChatWidget(session, model=label, describe=lambda: self._answering(key))
        # The widget, and under it the conversation as a static copy kept current: what a saved
        # notebook shows where the widget cannot be drawn (issue 19.1).
        SavedCopy(chat)
        if cell is not None and cell.strip():
            chat.send_message(cell.strip())
        return True

    def _interpolate(self, message: str) -> str:
        from IPython.utils.text import DollarFormatter

        try:
            return clean(DollarFormatter().vformat(message, [], self._ns))
        except Exception as exc:  # noqa: BLE001 - the user's own expression may raise anything
            raise UsageError(f"--interpolate could not expand the message: {type(exc).__name__}: {exc}") from None

    # --- subcommands --------------------------------------------------------------------------

    def _subcommand(self, name: str, arg: str, args: Namespace, cell: str | None) -> None:
        if name == "help":
            display(help_view(self.flue.parser))
            return None
        if name == "use":
            return self._use(arg, args)
        if name == "mcp":
            display(mcp_view())
            return None
        if name in ("allow", "revoke"):
            return self._grant(name, arg, args)
        if arg:
            raise UsageError(f"`%flue {name}` takes no argument (got {arg!r})")
        if name == "chat":
            if self._chat(args, cell):
                return None
            if cell is not None and cell.strip():
                return self._send(cell, args)
            name = "history"
        agent = self._agent_for_view(args)
        last = HISTORY_LAST if args.last is None else args.last
        if agent is None:
            return store_command(name, self._conversation(args), self._store_label(args), last=last)
        session = self._session(args, agent=agent)
        if name == "history":
            display(history_with_outcomes(session, last=last))
        elif name == "status":
            from flue_nb.notebook.views.history import status_view

            chosen = args.agent or self._chosen(self._conversation(args), self._db(args))
            label = "" if chosen else self._model_setting(args)
            shown = status_view(
                session.status(),
                store=mask_url(self._store_label(args)),
                model=label,
                sandbox="" if chosen else self._sandbox_text(),
                extra=self._approval_lines(session, args, chosen=bool(chosen)),
            )
            display(shown)
        elif name == "abort":
            ids = session.abort()
            print(
                f"flue: aborted {len(ids)} submission(s)" + (f": {', '.join(ids)}" if ids else " (nothing was running)")
            )
        elif name == "compact":
            compact(session)
        return None

    def _grant(self, name: str, arg: str, args: Namespace) -> None:
        """`%flue allow TOOL [PATTERN]` / `%flue revoke [TOOL [PATTERN] | all]`: this conversation's
        "always allow" grants, kept in its store."""
        from flue_nb.runtime.tools import grants as g

        tool, _, pattern = arg.strip().partition(" ")
        pattern = pattern.strip()
        if len(pattern) > 1 and pattern[0] == pattern[-1] and pattern[0] in "'\"":
            pattern = pattern[1:-1]
        if name == "allow" and not tool:
            raise UsageError(
                "`%flue allow TOOL [PATTERN]`: always allow calls of TOOL (whose command or path matches "
                "the fnmatch PATTERN, default every call) in this conversation, e.g. `%flue allow bash git status`"
            )
        cid = self._conversation(args)
        found = self._agents.get(self._key(cid, self._db(args)))
        store = found[1].store if found is not None else self._store(self._db(args), create=True)
        if name == "allow":
            kept = g.grant(store, cid, tool, pattern or "*")
            print(
                f"flue: conversation `{cid}` now always allows {g.Grant(tool, pattern or '*').describe()} "
                f"({len(kept)} grant(s); `%flue revoke {tool}` takes it back)"
            )
            return
        everything = tool in ("", "all")
        gone = g.revoke(store, cid, None if everything else tool, (pattern or None) if not everything else None)
        said = ", ".join(x.describe() for x in gone) or "nothing (no such grant)"
        print(f"flue: conversation `{cid}` no longer always allows: {said}")

    def _approval_lines(self, session: Session, args: Namespace, *, chosen: bool) -> list[str]:
        """`%flue status`'s lines on approval: the rules, the conversation's grants, the hub policy."""
        from flue_nb.runtime.policy import current_policy
        from flue_nb.runtime.tools.rules import ApprovalRules

        lines = []
        policy = current_policy()
        if not chosen:
            rules = ApprovalRules.of(args.approval or self.approval)
            lines.append(f"approval: {(policy.cap(rules) if policy else rules).describe()}")
        if allowed := session.grants():  # said only when there is some: `%flue allow` adds one
            lines.append("always allowed here: " + ", ".join(x.describe() for x in allowed))
        if policy is not None:
            lines.extend(policy.describe(session.store))
        return lines

    def _agent_for_view(self, args: Namespace) -> AgentDef | None:
        """The agent for a subcommand: the one this kernel talks to in this conversation (a
        subcommand never switches it), else the cell's, else None."""
        found = self._agents.get(self._key(self._conversation(args), self._db(args)))
        if found is not None and not (args.agent or args.model):
            return found[0]
        try:
            return self._agent(args)[0]
        except (FlueCellError, UsageError):
            if args.agent or args.model:
                raise  # what this cell asked for is wrong: say so
            # No model configured, or the conversation's agent is not defined in this kernel yet.
            found = self._agents.get(self._key(self._conversation(args), self._db(args)))
            return found[0] if found else None

    def _store_label(self, args: Namespace) -> str:
        """The store as `store_command` opens it: a URL, `:memory:` or an absolute path."""
        return store_key(self._db(args), os.getcwd())

    def _use(self, name: str, args: Namespace) -> None:
        name = name.strip()
        if name.startswith(ACP_PREFIX) and len(name) > len(ACP_PREFIX):
            # `%flue use acp:COMMAND ARGS...`: the rest of the line is the agent's command line.
            cid, db = self._conversation(args), self._db(args)
            self._hosted(name, cid, db)  # a command line that cannot be read fails here
            self._choose(cid, db, name)
            self._switch_open(args)
            print(f"flue: conversation `{cid}` now talks to the ACP agent `{name}` until you choose another")
            return
        if not name or len(name.split()) != 1:
            raise UsageError(
                f"`%flue use` takes one name (got {name!r}): `%flue use AGENT` (an @agent in the "
                "namespace), or `%flue use assistant` for the default. To send a message that "
                "starts with `use`, write `%flue -- use ...`"
            )
        cid, db = self._conversation(args), self._db(args)
        if name in ("assistant", "default"):
            self._choose(cid, db, None)
            self._switch_open(args)
            print(f"flue: conversation `{cid}` now talks to the default notebook assistant")
            return
        from flue_nb.runtime.agent import AgentDef

        if not isinstance(self._ns.get(name), AgentDef):
            raise UsageError(f"no @agent named `{name}` in the namespace; define it with @flue_nb.agent first")
        self._choose(cid, db, name)
        self._switch_open(args)
        print(
            f"flue: conversation `{cid}` now talks to agent `{name}` until you choose another "
            "(`%flue use assistant` for the default); the choice is kept in the store"
        )

    def _switch_open(self, args: Namespace) -> None:
        """After `%flue use`: a conversation open here (a chat) talks to the new agent at once."""
        if self._key(self._conversation(args), self._db(args)) not in self._agents:
            return  # not open in this kernel: the next cell opens it with the choice
        from flue_nb.runtime.errors import FlueError

        try:
            self._session(args)
        except (FlueError, FlueCellError, UsageError) as exc:
            # Busy, or the chosen agent cannot be built here yet: the choice is kept and the
            # next cell applies it; say why it is not in effect now.
            message = getattr(exc, "message", None) or str(exc)
            print(f"flue: the choice applies from the next cell ({message})")


@contextlib.contextmanager
def _store_failures() -> Iterator[None]:
    """A store that cannot be opened or read (a directory, not SQLite, damaged, truncated) is a
    one-paragraph error naming the file and what to do, never a traceback (issue 12.4)."""
    from flue_nb.runtime.errors import StoreError

    try:
        yield
    except StoreError as exc:
        raise FlueCellError(f"flue: {exc.message}") from None
