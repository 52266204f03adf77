"""What a kernel's cells talk to: the conversation, its store, its sticky agent, one open session each.

The base of `FlueMagics` that the magic, its subcommands and `%flue serve` open conversations
through; the runtime is imported when a cell first needs it (a kernel's start stays light).
"""

from __future__ import annotations

import os
import time
import uuid
from argparse import Namespace
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from flue_nb.notebook.document.identity import default_conversation_id
from flue_nb.notebook.magics._line import FlueCellError
from flue_nb.notebook.magics._settings import FlueSettings
from flue_nb.runtime.text import clean

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from flue_nb.runtime.agent import AgentDef
    from flue_nb.runtime.session import Session
    from flue_nb.runtime.store import Store

__all__ = ["ACP_PREFIX", "AGENT_CHOICE", "ConversationMagics", "Key"]

ACP_PREFIX = "acp:"
"""An agent named `acp:COMMAND` is an external ACP agent started with COMMAND (`flue_nb.acp.host`)."""

AGENT_CHOICE = "flue_nb.magics:agent"
"""Persistent-state name under which a conversation keeps the agent its cells talk to (None: the
default assistant); the colon keeps it apart from names an agent's `use_persistent_state` picks."""

Key = tuple[str, str]
"""(conversation id, store): the store as an absolute path, a URL, `:memory:` or `None`."""


class ConversationMagics(FlueSettings):
    """The conversations this kernel's cells opened, each with the agent it talks to."""

    @property
    def _ns(self) -> dict[str, Any]:
        """The kernel's namespace (a magic always runs in a shell)."""
        assert self.shell is not None
        ns: dict[str, Any] = self.shell.user_ns
        return ns

    def __init__(self, shell: InteractiveShell | None = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.conversation_id = default_conversation_id()
        """The conversation consecutive cells continue (`-c` switches it, `--new` starts one)."""
        self._choices: dict[Key, str | None] = {}
        """(conversation, store) -> the agent its cells talk to, as read from or written to the
        store (None: the default assistant)."""
        self._agents: dict[Key, tuple[AgentDef, Session]] = {}
        """(conversation, store) -> the agent and session it is open with in this kernel."""
        self._labels: dict[Key, str] = {}
        """(conversation, store) -> the model label of the agent in `_agents` ("" for an @agent)."""
        self.opened_at: float | None = None
        """When the last cell opened its conversation in this kernel (None: it was open)."""

    def _model_setting(self, args: Namespace) -> str:
        setting = (args.model or self.model or os.environ.get("FLUE_MODEL", "")).strip()
        # jupyter-ai spells a model `provider:model`; ours is `provider/model`.
        from flue_nb.runtime.providers import split_spec

        provider, model_id = split_spec(setting)
        return f"{provider}/{model_id}" if provider else setting

    def _agent(self, args: Namespace) -> tuple[AgentDef, str]:
        """The agent for this cell and a label for its model."""
        from flue_nb.runtime.agent import AgentDef as Agent

        cid = self._conversation(args)
        chosen = None if args.agent else self._chosen(cid, self._db(args))
        name = args.agent or chosen
        if name:
            if chosen and args.model:
                raise UsageError(
                    f"`-m` sets the default assistant's model, but conversation `{cid}` talks to "
                    f"agent `{chosen}`; `%flue use assistant` first"
                )
            if name.startswith(ACP_PREFIX):
                return self._hosted(name, cid, self._db(args)), ""
            obj = self._ns.get(name)
            if not isinstance(obj, Agent):
                found = "nothing" if obj is None else f"a {type(obj).__name__}"
                why = (
                    f"conversation `{cid}` talks to agent `{name}` (chosen with --agent or "
                    f"`%flue use`), but the namespace has {found} by that name: run the cell that "
                    "defines it, or `%flue use assistant`"
                    if chosen
                    else f"no @agent named `{name}` in the namespace (found {found}); define it with @flue_nb.agent"
                )
                raise UsageError(why)
            return obj, ""
        from flue_nb.notebook.kernel.assistant import make_assistant, resolve_spec

        setting = self._model_setting(args)
        from flue_nb.runtime.errors import FlueError

        try:
            spec = resolve_spec(setting, self._ns)
        except FlueError as exc:
            if args.model:
                raise UsageError(exc.message) from None
            raise FlueCellError(exc.message) from None
        if isinstance(spec, str):
            from flue_nb.runtime.providers import split_spec

            if not split_spec(spec)[0]:
                problem = (
                    f"unknown model {spec!r}: use `anthropic/<model-id>`, `openai/<model>`, "
                    "`openai-responses/<model>`, `azure/<deployment>`, `bedrock/<model-id>` or `vertex/<model-id>` (`:` works "
                    "for `/`), e.g. `anthropic/claude-sonnet-4-6`, or the name of a Model object "
                    "in the namespace"
                )
                if args.model:
                    raise UsageError(problem)
                raise FlueCellError(f"flue: {problem} (from the model setting)")
        label = spec if isinstance(spec, str) else f"{setting} ({type(spec).__name__})"
        return make_assistant(
            spec,
            approval=args.approval or self.approval,
            approval_timeout=self.approval_timeout or None,
            python_tool=self.python_tool,
            **self._containment(),
        ), label

    def _hosted(self, spec: str, cid: str, db: str | None) -> AgentDef:
        """The external ACP agent `acp:COMMAND` of conversation `cid` (one process per conversation)."""
        try:
            from flue_nb.acp.hosting import hosted_agent
        except ImportError as exc:
            raise UsageError(
                f"`{ACP_PREFIX}` agents need the ACP package: pip install 'flue_nb[acp]' ({exc})"
            ) from None
        from flue_nb.runtime.errors import ConfigError

        try:
            found: AgentDef = hosted_agent(spec, conversation=cid, store=self._key(cid, db)[1])
        except ConfigError as exc:
            raise UsageError(exc.message) from None
        return found

    def _conversation(self, args: Namespace) -> str:
        # Once per cell: `--new` must not make two ids when both the agent and the session ask.
        cid: str | None = getattr(args, "conversation_id", None)
        if cid is None:
            if args.new:
                self.conversation_id = f"{default_conversation_id()}-{uuid.uuid4().hex[:8]}"
            elif args.conversation:
                # Escaped like every text the store keeps, so the id sticks usable (runtime._text).
                self.conversation_id = clean(args.conversation)
            cid = args.conversation_id = self.conversation_id
        return cid

    def _db(self, args: Namespace) -> str | None:
        return args.db or self.db or os.environ.get("FLUE_DB") or None

    def _key(self, cid: str, db: str | None) -> Key:
        if db and db != ":memory:" and "://" not in db:
            return cid, os.path.abspath(db)
        return cid, str(db)

    def _store(self, db: str | None, *, create: bool) -> Store | None:
        """The store file `db` names (shared with the sessions), or None: in memory, or absent."""
        if db == ":memory:":
            return None
        if not create and "://" not in (db or ""):
            path = db or os.path.join(".flue", "flue.sqlite")
            if not os.path.exists(path):
                return None
        from flue_nb.runtime.session import store_for

        return store_for(db, os.getcwd())[0]

    def _chosen(self, cid: str, db: str | None) -> str | None:
        """The agent conversation `cid` talks to (None: the default assistant)."""
        key = self._key(cid, db)
        if key not in self._choices:
            store = self._store(db, create=False)
            value = store.state(cid).get(AGENT_CHOICE) if store is not None else None
            self._choices[key] = value if isinstance(value, str) and value else None
        return self._choices[key]

    def _choose(self, cid: str, db: str | None, name: str | None) -> None:
        """Make `name` (None: the default assistant) the agent of `cid`, durably."""
        if self._chosen(cid, db) == name:
            return
        self._choices[self._key(cid, db)] = name
        store = self._store(db, create=True)
        if store is not None:
            now = time.time()
            store.ensure_conversation(cid, now=now)
            store.append(cid, None, [("state", {"name": AGENT_CHOICE, "value": name})], now=now)

    def _session(self, args: Namespace, *, agent: AgentDef | None = None, label: str = "") -> Session:
        from flue_nb.runtime import tracing
        from flue_nb.runtime.session import init

        if self.otel and not tracing.instrumented():
            tracing.instrument()
        cid = self._conversation(args)
        db = self._db(args)
        if agent is None:
            agent, label = self._agent(args)
        key = self._key(cid, db)
        previous = self._agents.get(key)
        if previous is not None and previous[0] is not agent:
            if any(s.state.value != "settled" for s in previous[1].submissions()):
                raise UsageError(
                    f"conversation `{cid}` is busy with agent `{previous[0].name}`; "
                    "wait for it, or `%flue abort`, "
                    "before switching agents"
                )
        if previous is not None and previous[0] is agent:
            self.opened_at = None
            return previous[1]
        self.opened_at = time.time()
        session = init(
            agent,
            conversation=cid,
            db=db,
            lease_ttl=self.lease_ttl,
            admission=self._admission(args),
            rebuild=lambda stored: self._rebuild(stored, args),
        )
        self._agents[key] = (agent, session)
        self._labels[key] = label
        if previous is not None:
            _retitle(cid)  # an open chat of this conversation now names who answers next
        return session

    def _answering(self, key: Key) -> tuple[str, str]:
        """The agent and model label the next message of conversation `key` goes to, here."""
        found = self._agents.get(key)
        return (found[0].name, self._labels.get(key, "")) if found else ("", "")

    def _admission(self, args: Namespace) -> dict[str, Any]:
        """What a submission records about its cell (issue 12.8): the default assistant's model
        setting and approval policy; an @agent's name is recorded by the runtime."""
        if args.agent or self._chosen(self._conversation(args), self._db(args)):
            return {}
        return {"model": self._model_setting(args), "approval": args.approval or self.approval}

    def _containment(self) -> dict[str, Any]:
        """The sandbox settings the default assistant's commands run under."""
        # allow_hosts means nothing without a sandbox (every host is reachable): not an error here.
        hosts = tuple(self.allow_hosts) if self.sandbox != "none" else ()
        return {"sandbox": self.sandbox, "allow_hosts": hosts, "hide_paths": tuple(self.hide_paths)}

    def _sandbox_text(self) -> str:
        """`%flue status`'s line on where the default assistant's commands run."""
        from flue_nb.runtime.sandbox.contain import containment

        settings = self._containment()
        return containment(settings["sandbox"], settings["allow_hosts"], settings["hide_paths"]).describe(os.getcwd())

    def _rebuild(self, stored: dict[str, Any], args: Namespace) -> AgentDef | None:
        """The agent a recovered submission was admitted with, from what it recorded."""
        from flue_nb.runtime.agent import AgentDef as Agent

        if "approval" in stored:  # the default assistant, with its cell's policy
            from flue_nb.notebook.kernel.assistant import make_assistant, resolve_spec

            setting = stored.get("model") or self._model_setting(args)
            return make_assistant(
                resolve_spec(setting, self._ns),
                approval=stored["approval"],
                approval_timeout=self.approval_timeout or None,
                **self._containment(),
            )
        found = self._ns.get(stored.get("agent", ""))
        return found if isinstance(found, Agent) else None


def _retitle(conversation_id: str) -> None:
    """Redraw the title of the chats open on a conversation (its agent changed)."""
    try:
        from flue_nb.notebook.views.chat.widget import open_widgets
    except ImportError:  # anywidget missing (a damaged environment): no chat to tell
        return
    for widget in open_widgets():
        if widget.session.conversation_id == conversation_id:
            widget.flush()
