"""The framework's own tools (contract 8) and assembly of the tools array (1.2, 1.4)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flue_nb.runtime.agent import SubagentDef
from flue_nb.runtime.agent.skills import Skill
from flue_nb.runtime.errors import ToolNameConflictError
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput

__all__ = ["RESERVED_NAMES", "activate_skill_tool", "assemble_tools", "read_skill_resource_tool", "task_tool"]

RESERVED_NAMES = frozenset({"task", "activate_skill", "read_skill_resource"})


class TaskInput(BaseModel):
    """Input of `task`."""

    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(description="What the subagent should do, with all the context it needs.")
    agent: str = Field(description="The name of the subagent to delegate to.")
    description: str | None = Field(None, description="A few words describing the task, for the user.")
    cwd: str | None = Field(None, description="Working directory for the subagent, relative to yours.")


RunTask = Callable[[TaskInput, ToolContext], Awaitable[str]]


def task_tool(subagents: Sequence[SubagentDef], run_task: RunTask) -> Tool:
    """`task`: delegate to a declared subagent; the child's final text is the result (8.1)."""
    names = [s.name for s in subagents]
    roster = "\n".join(f"- {s.name}: {s.description}" for s in subagents) or "(no subagents are declared)"

    async def run(args: BaseModel, ctx: ToolContext) -> ToolOutput | str:
        assert isinstance(args, TaskInput)
        if args.agent not in names:
            available = ", ".join(f"`{n}`" for n in names) or "none (this agent declares no subagents)"
            return ToolOutput(f"No subagent named `{args.agent}`. Available subagents: {available}.", is_error=True)
        return await run_task(args, ctx)

    description = (
        "Delegate a self-contained task to a subagent. It starts with a fresh context, works in "
        "the same sandbox and returns only its final answer.\nSubagents:\n" + roster
    )
    # Durable: after a crash the call is re-run, and the subagent resumes from its records.
    return Tool("task", description, TaskInput, run, durable=True, summary_arg="description")


class ActivateSkillInput(BaseModel):
    """Input of `activate_skill`."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="The skill to activate.")


def activate_skill_tool(skills: Sequence[Skill]) -> Tool:
    """`activate_skill`: return a skill's full instructions (8.2)."""
    by_name = {s.name: s for s in skills}

    def run(args: BaseModel, ctx: ToolContext) -> ToolOutput:
        assert isinstance(args, ActivateSkillInput)
        skill = by_name.get(args.name)
        if skill is None:
            available = ", ".join(f"`{n}`" for n in by_name)
            return ToolOutput(f"No skill named `{args.name}`. Available skills: {available}.", is_error=True)
        head = f"# Skill: {skill.name}\n"
        if skill.resources:
            head += "Resource files (read them with `read_skill_resource`): " + ", ".join(skill.resources) + "\n"
        return ToolOutput(head + "\n" + skill.instructions)

    roster = "\n".join(f"- {s.name}: {s.description}" for s in skills)
    return Tool(
        "activate_skill", "Activate a skill to get its full instructions.\nSkills:\n" + roster, ActivateSkillInput, run
    )


class ReadSkillResourceInput(BaseModel):
    """Input of `read_skill_resource`: `read`'s parameters plus the skill."""

    model_config = ConfigDict(extra="forbid")
    skill: str = Field(description="The skill that packages the file.")
    path: str = Field(description="The resource's path inside the skill folder.")
    offset: int | None = Field(None, description="1-indexed line to start from.")
    limit: int | None = Field(None, description="Maximum number of lines.")


def read_skill_resource_tool(skills: Sequence[Skill]) -> Tool:
    """`read_skill_resource`: read a packaged file with `read`'s parameters and limits (8.3)."""
    from flue_nb.runtime.sandbox.local import local
    from flue_nb.runtime.tools import read_tool
    from flue_nb.runtime.tools.tool import execute_tool

    by_name = {s.name: s for s in skills if s.resources}
    readers: dict[str, Tool] = {}

    async def run(args: BaseModel, ctx: ToolContext) -> ToolOutput:
        assert isinstance(args, ReadSkillResourceInput)
        skill = by_name.get(args.skill)
        if skill is None:
            available = ", ".join(f"`{n}`" for n in by_name)
            return ToolOutput(
                f"No skill named `{args.skill}` with resources. Skills with resources: {available}.", is_error=True
            )
        if args.path not in skill.resources:
            listed = ", ".join(skill.resources)
            return ToolOutput(
                f"`{args.path}` is not a resource of skill `{skill.name}`. Its resources: {listed}.", is_error=True
            )
        reader = readers.get(skill.name)
        if reader is None:
            reader = readers[skill.name] = read_tool(local(skill.path))
        raw: dict[str, Any] = {"path": os.path.join(skill.path, args.path)}
        if args.offset is not None:
            raw["offset"] = args.offset
        if args.limit is not None:
            raw["limit"] = args.limit
        return await execute_tool(reader, raw, ctx)

    return Tool(
        "read_skill_resource",
        "Read a resource file packaged with a skill (same paging as `read`).",
        ReadSkillResourceInput,
        run,
        summary_arg="path",
    )


def assemble_tools(sandbox_tools: Sequence[Tool], framework: Sequence[Tool], own: Sequence[Tool]) -> list[Tool]:
    """Order the tools array (1.2) and refuse reserved or duplicate names (1.4)."""
    for t in own:
        if t.name in RESERVED_NAMES:
            raise ToolNameConflictError(
                f"tool name {t.name!r} is reserved by the framework ({', '.join(sorted(RESERVED_NAMES))}); rename your tool"
            )
    seen: set[str] = set()
    out = [*sandbox_tools, *framework, *own]
    for t in out:
        if t.name in seen:
            raise ToolNameConflictError(f"two tools are named {t.name!r}; tool names must be unique")
        seen.add(t.name)
    return out
