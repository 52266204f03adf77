"""Hooks and rendering: an agent function calls `use_*` hooks; a render collects them.

The agent function is rendered before every model call, each time in a fresh frame, so a
conditional hook (a tool mounted only when a file exists, a sandbox attached only sometimes)
is re-read at every turn boundary (contract 9.3).
"""

from __future__ import annotations

import contextvars
import re
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flue_nb.runtime.agent import AgentDef, SubagentDef
from flue_nb.runtime.errors import AgentError, ConfigError, FlueError, HookError, ToolNameConflictError, raised_at
from flue_nb.runtime.tools.tool import Tool

__all__ = [
    "Rendered",
    "render",
    "use_agent_finish",
    "use_agent_start",
    "use_instruction",
    "use_mcp",
    "use_model",
    "use_persistent_state",
    "use_response_finish",
    "use_response_start",
    "use_sandbox",
    "use_skill",
    "use_subagent",
    "use_tool",
]

_MISSING = object()

_scripts: weakref.WeakKeyDictionary[Any, tuple[Any, bool]] = weakref.WeakKeyDictionary()
"""Agent function -> (the ScriptedModel its last render passed, warned already)."""


@dataclass(slots=True)
class Rendered:
    """What one render of an agent function declared."""

    agent: AgentDef
    model: Any = None
    compaction: Any = True
    """True (default config), False (threshold compaction off) or a CompactionConfig."""
    sandbox: Any = None
    """A Sandbox instance or a zero-argument factory returning one; None = no sandbox."""
    tools: list[Tool] = field(default_factory=list)
    skills: list[Any] = field(default_factory=list)
    subagents: list[SubagentDef] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)
    mcp: list[Any] = field(default_factory=list)
    """`McpServer`s declared with `use_mcp`, in order."""
    lifecycle: dict[str, list[Callable[..., Any]]] = field(default_factory=dict)
    """Lifecycle callbacks by moment (`agent_start`, `agent_finish`, `response_start`,
    `response_finish`), in the order the hooks were called."""


@dataclass(slots=True)
class _Frame:
    rendered: Rendered
    is_subagent: bool
    state: dict[str, Any]
    set_state: Callable[[str, Any], None]
    model_calls: int = 0
    sandbox_calls: int = 0


_frame: contextvars.ContextVar[_Frame | None] = contextvars.ContextVar("flue_render_frame", default=None)


def _current(hook: str) -> _Frame:
    frame = _frame.get()
    if frame is None:
        raise HookError(
            f"`{hook}()` was called outside an agent render. Call hooks only inside a function "
            "decorated with `@agent`, and let the runtime call it (flue.init(agent).prompt(...))."
        )
    return frame


def render(
    agent: AgentDef,
    *,
    is_subagent: bool = False,
    state: dict[str, Any] | None = None,
    set_state: Callable[[str, Any], None] | None = None,
) -> Rendered:
    """Run the agent function in a fresh frame and return what its hooks declared."""
    frame = _Frame(
        Rendered(agent),
        is_subagent,
        state if state is not None else {},
        set_state or (lambda name, value: None),
    )
    token = _frame.set(frame)
    try:
        result = agent.fn()
    except FlueError:
        raise  # a hook refused its call (HookError, ConfigError): already in our words
    except Exception as exc:
        raise AgentError(
            f"the agent function `{agent.name}` raised {type(exc).__name__}: {exc}{raised_at(exc)}",
            agent=agent.name,
        ) from exc
    finally:
        _frame.reset(token)
    if frame.model_calls == 0 and not is_subagent:
        raise HookError(
            f"agent {agent.name!r} did not call `use_model(...)`: every agent needs exactly one "
            'model, e.g. use_model("anthropic/claude-sonnet-4-6") or use_model(ScriptedModel([...])).'
        )
    if result is not None:
        if not isinstance(result, str):
            raise ConfigError(
                f"agent {agent.name!r} returned {type(result).__name__}; return the instructions "
                "as a string (or nothing)"
            )
        frame.rendered.instructions.insert(0, result)
    return frame.rendered


def use_model(model: Any, *, compaction: Any = True) -> None:
    """Choose the model: a spec like "anthropic/claude-sonnet-4-6" or a Model object."""
    frame = _current("use_model")
    frame.model_calls += 1
    if frame.model_calls > 1:
        raise HookError("`use_model()` was called twice in one render; call it exactly once")
    if model is None or model == "":
        raise HookError("`use_model()` needs a model spec or a Model object, got nothing")
    from flue_nb.runtime.agent.settings import CompactionConfig

    if not (compaction is True or compaction is False or isinstance(compaction, CompactionConfig)):
        raise ConfigError(f"`compaction` must be True, False or a CompactionConfig, got {compaction!r}")
    frame.rendered.model = model
    frame.rendered.compaction = compaction
    _check_script(frame.rendered.agent, model)


def _check_script(agent: AgentDef, model: Any) -> None:
    """Warn once per agent when each render passes a new `ScriptedModel` (issue 12.9).

    A script built inside the agent function starts over at every render (before every model
    call), so the run never gets past its first step: the loop repeats until its turn limit.
    """
    from flue_nb.runtime.providers.offline import ScriptedModel

    if not isinstance(model, ScriptedModel):
        return
    try:
        last, warned = _scripts.get(agent.fn, (None, False))
    except TypeError:  # a callable that cannot be weakly referenced: not worth a strong one
        return
    if last is not None and last is not model and not warned:
        warnings.warn(
            f"agent {agent.name!r} passed a new ScriptedModel to use_model() at this render: the "
            "agent function runs before every model call, so its script starts over each time. "
            "Create the model once, outside the agent function, and pass that object.",
            RuntimeWarning,
            stacklevel=3,
        )
        warned = True
    _scripts[agent.fn] = (model, warned)


def use_sandbox(sandbox: Any) -> None:
    """Attach a sandbox (an instance, or a zero-argument factory built once per submission)."""
    frame = _current("use_sandbox")
    if frame.is_subagent:
        raise HookError(
            "`use_sandbox()` was called in a subagent; subagents share their parent's sandbox "
            "(give the task a `cwd` to scope it)"
        )
    frame.sandbox_calls += 1
    if frame.sandbox_calls > 1:
        raise HookError("`use_sandbox()` was called twice in one render; an agent has at most one sandbox")
    if sandbox is None:
        raise HookError("`use_sandbox(None)`: to run without a sandbox, don't call use_sandbox")
    frame.rendered.sandbox = sandbox


def use_tool(tool: Tool) -> None:
    """Mount a tool made with `@flue.tool` or `flue.define_tool`."""
    frame = _current("use_tool")
    if not isinstance(tool, Tool):
        raise ConfigError(f"`use_tool()` needs a tool made with @flue.tool or flue.define_tool, got {tool!r}")
    if any(t.name == tool.name for t in frame.rendered.tools):
        raise ToolNameConflictError(f"two tools are named {tool.name!r}; tool names must be unique")
    frame.rendered.tools.append(tool)


def use_mcp(
    name: str,
    *,
    command: Sequence[str] | None = None,
    url: str | None = None,
    tools: Sequence[str] | None = None,
    optional: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    call_timeout: float | None = 300.0,
    prefix: str | None = None,
) -> None:
    """Mount an MCP server's tools as `mcp__<name>__<tool>` (or `<prefix><tool>`).

    The connection opens at the first render that declares the server and is reused by later
    submissions in this process. If it cannot connect, the submission fails before the model runs
    (`McpConnectionError`), or, with `optional=True`, runs without those tools and the model is
    told why.

    Args:
        name: A short name for the server (letters, digits, `_`, `-`); it prefixes its tools.
        command: Start a stdio server with this command line, e.g. `["python", "server.py"]`.
        url: Or connect to a streamable-HTTP server at this URL.
        tools: Mount only these of the server's tools (default: all it lists).
        optional: Run without the server when it cannot be reached instead of failing.
        env: Extra environment variables for a stdio server.
        cwd: Working directory of a stdio server.
        headers: HTTP headers sent to an HTTP server (e.g. authorization).
        timeout: Seconds allowed to start the server, initialise and list its tools (the first
            server of a process also waits for the SDK's import, outside this clock). A server
            that timed out is not tried again for a minute (each try would cost the timeout).
        call_timeout: Seconds one tool call may take (default 300); then it is cancelled and
            the model gets an error result. None: no limit (abort still stops a call).
        prefix: What the mounted names start with instead of `mcp__<name>__`; `""` mounts the
            server's tools under their own names (a server that is the agent's whole toolbox,
            such as a kernel's `%flue serve`). A name that collides with another tool's fails
            the submission (`ToolNameConflictError`).

    A stdio server's calls that the server does not mark read-only (`readOnlyHint`) run alone,
    in the order the model made them (read-only ones overlap one another, never a write); tools that require task-augmented execution are
    called as tasks (created, polled, fetched within `call_timeout`); progress the server reports reaches observers as `ToolUpdate` events.
    """
    frame = _current("use_mcp")
    from flue_nb.runtime.tools.mcp import McpServer

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ConfigError(f"`use_mcp()` needs a name of letters, digits, `_` or `-`, got {name!r}")
    if (command is None) == (url is None):
        raise ConfigError(f"`use_mcp({name!r})` needs exactly one of `command=[...]` (stdio) or `url=...` (HTTP)")
    if command is not None:
        if isinstance(command, str) or not command or not all(isinstance(c, str) and c for c in command):
            raise ConfigError(
                f"`use_mcp({name!r})`: `command` must be a non-empty list of strings, "
                f"e.g. command=['python', 'server.py'], got {command!r}"
            )
    if url is not None and not (isinstance(url, str) and re.match(r"https?://", url)):
        raise ConfigError(f"`use_mcp({name!r})`: `url` must start with http:// or https://, got {url!r}")
    if tools is not None and (isinstance(tools, str) or not all(isinstance(t, str) for t in tools)):
        raise ConfigError(f"`use_mcp({name!r})`: `tools` must be a list of tool names, got {tools!r}")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigError(f"`use_mcp({name!r})`: `timeout` must be a positive number of seconds, got {timeout!r}")
    if call_timeout is not None and (
        isinstance(call_timeout, bool) or not isinstance(call_timeout, (int, float)) or not call_timeout > 0
    ):
        raise ConfigError(
            f"`use_mcp({name!r})`: `call_timeout` must be a positive number of seconds or None, got {call_timeout!r}"
        )
    if prefix is not None and not (isinstance(prefix, str) and re.fullmatch(r"[A-Za-z0-9_-]*", prefix)):
        raise ConfigError(f"`use_mcp({name!r})`: `prefix` must be letters, digits, `_` or `-` (or ''), got {prefix!r}")
    if any(s.name == name for s in frame.rendered.mcp):
        raise HookError(f"two MCP servers are named {name!r}; names must be unique")
    frame.rendered.mcp.append(
        McpServer(
            name,
            command=tuple(command) if command is not None else None,
            url=url,
            tools=tuple(tools) if tools is not None else None,
            optional=bool(optional),
            env=tuple(sorted(env.items())) if env else None,
            cwd=str(cwd) if cwd is not None else None,
            headers=tuple(sorted(headers.items())) if headers else None,
            timeout=float(timeout),
            call_timeout=float(call_timeout) if call_timeout is not None else None,
            prefix=prefix,
        )
    )


def use_skill(skill: Any) -> None:
    """Import a skill: a directory holding SKILL.md (or a loaded Skill)."""
    frame = _current("use_skill")
    from flue_nb.runtime.agent.skills import Skill, load_skill

    loaded = skill if isinstance(skill, Skill) else load_skill(Path(skill), source="imported")
    if any(s.name == loaded.name for s in frame.rendered.skills):
        raise HookError(f"two skills are named {loaded.name!r}; skill names must be unique")
    frame.rendered.skills.append(loaded)


def use_subagent(subagent: SubagentDef) -> None:
    """Declare a subagent the model may delegate to with `task`."""
    frame = _current("use_subagent")
    if not isinstance(subagent, SubagentDef):
        raise ConfigError(f"`use_subagent()` needs define_subagent(...), got {subagent!r}")
    if any(s.name == subagent.name for s in frame.rendered.subagents):
        raise HookError(f"two subagents are named {subagent.name!r}; names must be unique")
    frame.rendered.subagents.append(subagent)


def use_instruction(text: str) -> None:
    """Add instruction text to the system prompt (after the returned instructions)."""
    frame = _current("use_instruction")
    if not isinstance(text, str):
        raise ConfigError(f"`use_instruction()` needs a string, got {type(text).__name__}")
    frame.rendered.instructions.append(text)


def use_persistent_state(name: str, default: Any = None) -> tuple[Any, Callable[[Any], None]]:
    """Return (value, setter) for durable state; a write commits with its tool batch (11.6)."""
    frame = _current("use_persistent_state")
    if not isinstance(name, str) or not name:
        raise ConfigError("`use_persistent_state()` needs a non-empty name")
    value = frame.state.get(name, _MISSING)
    setter_target = frame.set_state

    def set_value(new: Any) -> None:
        setter_target(name, new)

    return (default if value is _MISSING else value), set_value


def _on(moment: str, fn: Any) -> None:
    frame = _current(f"use_{moment}")
    if not callable(fn):
        raise ConfigError(f"`use_{moment}()` needs a function (sync or async), got {fn!r}")
    frame.rendered.lifecycle.setdefault(moment, []).append(fn)


def use_agent_start(fn: Callable[[], Any]) -> None:
    """Run `fn()` (sync or async) once per submission, before its first model call."""
    _on("agent_start", fn)


def use_agent_finish(fn: Callable[[Any], Any]) -> None:
    """Run `fn(finish)` once when the submission settles; `finish` is an `AgentFinish`."""
    _on("agent_finish", fn)


def use_response_start(fn: Callable[[], Any]) -> None:
    """Run `fn()` (sync or async) once before each model response."""
    _on("response_start", fn)


def use_response_finish(fn: Callable[[Any], Any]) -> None:
    """Run `fn(response)` once after each model response; a returned mapping joins its metadata."""
    _on("response_finish", fn)
