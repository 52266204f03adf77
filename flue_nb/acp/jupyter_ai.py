"""flue_nb as a persona of jupyter-ai's chat (jupyter-ai 3.x), working in the kernel of a notebook.

jupyter-ai loads it through the `jupyter_ai.personas` entry point (flue_nb's pyproject.toml); this
module imports jupyter-ai's packages, so only jupyter-ai's persona manager imports it.

Why an ACP persona (a `BaseAcpPersona` of `jupyter-ai-acp-client`) rather than a native one (a
`BasePersona` of `jupyter-ai-persona-manager` running flue_nb's loop in the Jupyter server):
- Approvals: jupyter-ai shows an ACP agent's `session/request_permission` on the tool call's card
  in the chat, with the agent's options as buttons. `flue-nb acp` already asks that way for every
  tool that changes something, so a chat user approves flue_nb's calls as flue_nb means them. A
  native persona has no approval surface in jupyter-ai's chat at all.
- Tool calls, thinking and streamed text are drawn by the ACP client as for Claude or Codex.
- Nothing of flue_nb runs in the server's process. That matters: jupyter-ai 3.2 pins `mcp<2` (through
  jupyter-server-mcp and fastmcp 3) and `agent-client-protocol<0.12`, while flue_nb[acp] needs
  `mcp>=2` (the kernel serves its tools over MCP) and `agent-client-protocol>=0.12.1`, so the two
  cannot share one environment. jupyter-ai's environment gets plain `flue_nb` (this module and its
  entry point); the agent runs in the kernel's environment, which has flue_nb[acp].

Which notebook: the chat `NAME.chat` works in `NAME.ipynb` beside it when that notebook has a
running kernel; otherwise in the notebook whose kernel was active last (the one the user is working
in). With no notebook kernel running, the chat says so. The kernel is found in the server itself
(its session and kernel managers) and named to the agent per session in `session/new`'s `_meta`
(`{"flue_nb": {"kernel": CONNECTION_FILE, "notebook": PATH}}`): jupyter-ai runs one agent process
per persona for every chat, each chat one session.

Which Python runs `flue-nb acp`: `$FLUE_NB_ACP_COMMAND` when set (a command line), else the
kernel's own Python (`sys.executable` asked in the kernel of the first chat's notebook), which must
have `flue_nb[acp]`. The model is the agent's (`$FLUE_MODEL` in the server's environment).
"""

from __future__ import annotations

import asyncio
import os
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from jupyter_ai_acp_client.base_acp_persona import BaseAcpPersona
from jupyter_ai_acp_client.default_acp_client import JaiAcpClient
from jupyter_ai_persona_manager import PersonaDefaults

from flue_nb.acp.kernel import _client, _evaluate
from flue_nb.runtime.errors import ConfigError

__all__ = ["COMMAND_ENV", "FlueNbAcpClient", "FlueNbPersona", "NoNotebookKernel", "NotebookKernel", "notebook_kernel"]

COMMAND_ENV = "FLUE_NB_ACP_COMMAND"
"""The command line that runs flue_nb's ACP agent, when not the kernel's Python."""

_AVATAR = os.path.join(os.path.dirname(__file__), "flue_nb.svg")
_NO_KERNEL = (
    "flue_nb works in the kernel of a notebook, and no notebook has a running kernel. Open "
    "{twin} (or another notebook), start its kernel, then send the message again."
)


class NoNotebookKernel(Exception):
    """No notebook kernel for this chat to work in (or one flue_nb cannot run beside): said in the chat."""


@dataclass(frozen=True, slots=True)
class NotebookKernel:
    """The notebook a chat works in and its running kernel."""

    path: str
    """The notebook's path under the server's root, as the sessions API gives it."""
    connection_file: str
    kernel_id: str

    def meta(self) -> dict[str, str]:
        """`session/new`'s `_meta.flue_nb`: what `flue-nb acp` attaches to."""
        return {"kernel": self.connection_file, "notebook": self.path}


def _twin(chat_path: str) -> str:
    """The notebook a chat file names: `x.chat` -> `x.ipynb` (a `.chat` suffix of any case)."""
    stem, _ = os.path.splitext(chat_path)
    return stem + ".ipynb"


async def notebook_kernel(serverapp: Any, chat_path: str) -> NotebookKernel:
    """The notebook the chat at `chat_path` (relative to the server's root) works in: `x.ipynb`
    beside `x.chat` if its kernel runs, else the notebook whose kernel was active last."""
    kernels = serverapp.kernel_manager
    running = []
    for s in await serverapp.session_manager.list_sessions():
        kernel_id = (s.get("kernel") or {}).get("id")
        path = s.get("path") or ""
        if s.get("type") == "notebook" and kernel_id and path.endswith(".ipynb") and kernel_id in kernels:
            running.append((path, kernel_id))
    twin = _twin(chat_path.replace(os.sep, "/"))
    if not running:
        raise NoNotebookKernel(_NO_KERNEL.format(twin=twin))
    chosen = next(((p, k) for p, k in running if p == twin), None)
    if chosen is None:
        epoch = datetime.min.replace(tzinfo=timezone.utc)
        chosen = max(running, key=lambda pk: getattr(kernels.get_kernel(pk[1]), "last_activity", None) or epoch)
    path, kernel_id = chosen
    return NotebookKernel(path, kernels.get_kernel(kernel_id).connection_file, kernel_id)


def _kernel_python(connection_file: str) -> tuple[str, bool]:
    """The kernel's Python and whether it has flue_nb with the ACP package (asked in the kernel)."""
    client = _client(connection_file, 30.0)
    try:
        found = "__import__('importlib.util').util.find_spec"
        value = _evaluate(client, f"(__import__('sys').executable, bool({found}('flue_nb') and {found}('acp')))", 30.0)
        return str(value[0]), bool(value[1])
    finally:
        client.stop_channels()


def _closing(persona: Any) -> bool:
    """Whether jupyter-ai is shutting this persona down (its chat was closed or reloaded)."""
    return bool(getattr(persona, "_shutting_down", False))


class FlueNbAcpClient(JaiAcpClient):  # type: ignore[misc]  # jupyter-ai is not typed (nor installed for mypy)
    """jupyter-ai's ACP client, naming the chat's notebook kernel in each `session/new` and
    `session/load` (`_meta.flue_nb`).

    A session's id is its notebook's conversation, so every persona of a chat on that notebook
    (jupyter-ai makes a new one each time the chat is opened again, a page reload too) gets the
    same id, where the base client expects one persona per id. So the persona that sends a message
    takes the session (`FlueNbPersona.process_message`), a persona being shut down never takes it,
    and ending the session of one leaves it alone while another persona holds it."""

    def _take(self, session_id: str, persona: Any) -> None:
        held = self._personas_by_session.get(session_id)
        if not _closing(persona) or held is None:
            self._personas_by_session[session_id] = persona

    async def create_session(self, persona: Any) -> Any:
        """`session/new` in the chat's notebook kernel."""
        found = await persona.notebook_kernel()
        conn = await self.get_connection()
        mcp_servers = await self._get_mcp_servers(persona)
        session = await conn.new_session(cwd=persona.get_chat_dir(), mcp_servers=mcp_servers, flue_nb=found.meta())
        self._take(session.session_id, persona)
        return session

    async def end_session(self, session_id: str) -> None:
        """Clean the session up, unless a persona still open holds it (another view of the chat)."""
        held = self._personas_by_session.get(session_id)
        if held is not None and not _closing(held):
            return
        await super().end_session(session_id)

    async def _load_session_rpc(self, persona: Any, session_id: str) -> Any:
        """`session/load` in the chat's notebook kernel (as the base class's, with `_meta`)."""
        found = await persona.notebook_kernel()
        conn = await self.get_connection()
        mcp_servers = await self._get_mcp_servers(persona)
        response = await conn.load_session(
            cwd=persona.get_chat_dir(), session_id=session_id, mcp_servers=mcp_servers, flue_nb=found.meta()
        )
        self._take(session_id, persona)
        return response


class FlueNbPersona(BaseAcpPersona):  # type: ignore[misc]  # jupyter-ai is not typed (nor installed for mypy)
    """flue_nb in jupyter-ai's chat: `flue-nb acp` working in the chat's notebook kernel."""

    # jupyter-ai prefixes a session's first prompt with advice on its own notebook MCP tools; flue_nb
    # works through the kernel's tools and says so itself.
    NOTEBOOK_EDITING_GUIDANCE = ""
    acp_client_class = FlueNbAcpClient

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The command is chosen when the agent first starts (`before_agent_subprocess`): by default
        # it is the kernel's Python, known once a notebook kernel runs.
        super().__init__(*args, executable=[], **kwargs)

    @property
    def defaults(self) -> PersonaDefaults:
        """Name, description and avatar in the chat."""
        return PersonaDefaults(
            name="flue_nb",
            description="flue_nb's agent, working in the kernel of your notebook (flue_nb's approvals).",
            avatar_path=_AVATAR,
            system_prompt="unused",  # the agent has its own
        )

    async def notebook_kernel(self) -> NotebookKernel:
        """The notebook this chat works in and its kernel (`NoNotebookKernel` when none runs)."""
        serverapp = self.parent.parent.serverapp  # persona manager -> its extension -> the server
        return await notebook_kernel(serverapp, self.get_chat_path(relative=True))

    async def before_agent_subprocess(self) -> None:
        """Choose the agent's command: `$FLUE_NB_ACP_COMMAND`, else the notebook kernel's Python."""
        command = os.environ.get(COMMAND_ENV, "").strip()
        if command:
            self._executable = shlex.split(command)
            return
        found = await self.notebook_kernel()
        try:
            python, ready = await asyncio.to_thread(_kernel_python, found.connection_file)
        except ConfigError as exc:
            raise NoNotebookKernel(f"The kernel of {found.path} did not answer: {exc.message}") from None
        if not ready:
            raise NoNotebookKernel(
                f"The kernel of {found.path} runs {python}, which has no flue_nb with its ACP extra: "
                f"`{python} -m pip install 'flue_nb[acp]'` (in the kernel's environment, not jupyter-ai's), "
                f"or set {COMMAND_ENV} to a `flue-nb acp` command, then restart Jupyter."
            )
        self._executable = [python, "-m", "flue_nb.cli", "acp"]

    async def process_message(self, message: Any) -> None:
        """Take the session for this chat (see `FlueNbAcpClient`), then send the message."""
        client = await self.get_client()
        client._personas_by_session[await self.get_session_id()] = self
        await super().process_message(message)

    async def handle_uncaught_exception(self, exc: Exception) -> None:
        """A missing notebook kernel is said plainly; anything else as jupyter-ai says it."""
        if isinstance(exc, NoNotebookKernel):
            self.send_message(str(exc))
            return
        await super().handle_uncaught_exception(exc)
