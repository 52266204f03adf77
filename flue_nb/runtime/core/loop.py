"""The turn loop: render → compose → stream the model → run tool calls concurrently → repeat.

`AgentRun` is one response of one agent: the top-level run of a submission (durable, with joins)
or a subagent's run (ephemeral). What differs is injected: the recorder, the joins source and
the event callback. The loop ends at an answer without tool calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flue_nb.runtime import events as ev
from flue_nb.runtime.agent import AgentDef
from flue_nb.runtime.agent.framework import (
    activate_skill_tool,
    assemble_tools,
    read_skill_resource_tool,
    task_tool,
)
from flue_nb.runtime.agent.hooks import Rendered, render
from flue_nb.runtime.agent.limits import Limits
from flue_nb.runtime.agent.prompt import compose_system, describe_environment, diff_roster, make_roster
from flue_nb.runtime.agent.skills import Skill, discover_workspace_skills
from flue_nb.runtime.core.budget import Budget
from flue_nb.runtime.core.compact_run import CompactionJob, compact_window
from flue_nb.runtime.core.lifecycle import Lifecycle
from flue_nb.runtime.core.model_call import ModelCalls, refusal_error
from flue_nb.runtime.core.run_settings import RunSettings
from flue_nb.runtime.core.subagent_task import MAX_DEPTH, SubagentTasks
from flue_nb.runtime.core.task_record import step_responses
from flue_nb.runtime.core.tool_calls import ToolCalls
from flue_nb.runtime.core.transcript import MemoryRecorder, Recorder, Transcript
from flue_nb.runtime.errors import ContextOverflowError, TurnLimitExceededError
from flue_nb.runtime.events import CompactionReason, Emit
from flue_nb.runtime.messages import AssistantMessage, Message, UserMessage
from flue_nb.runtime.policy import check_mcp_servers
from flue_nb.runtime.providers.model import Model, ModelRequest
from flue_nb.runtime.sandbox import Sandbox
from flue_nb.runtime.tools.mcp import mount_mcp, unavailable_signals
from flue_nb.runtime.tools.summary import Summaries
from flue_nb.runtime.tools.tool import Tool

__all__ = ["MAX_DEPTH", "AgentRun", "Emit", "RunSettings"]

_CUT = (
    "the answer was cut off: it reached its output limit (`max_tokens`), so it ends mid-way; "
    "ask the agent to go on, or give the model a larger max_output_tokens"
)

JoinSource = Callable[[], "list[UserMessage]"]
"""Commits the messages waiting to join (store and window) and returns them."""


def _is_sandbox(obj: Any) -> bool:
    return isinstance(obj, Sandbox)


class AgentRun(ModelCalls, ToolCalls, SubagentTasks):
    """One response of one agent, from its first model call to an answer without tool calls."""

    def __init__(
        self,
        agent: AgentDef,
        *,
        transcript: Transcript,
        emit: Emit,
        settings: RunSettings,
        recorder: Recorder | None = None,
        state: dict[str, Any] | None = None,
        depth: int = 0,
        parent_sandbox: Any = None,
        model_override: Any = None,
        joins: JoinSource | None = None,
        tools_cache: dict[int, list[Tool]] | None = None,
        submission_id: str | None = None,
        max_turns: int | None = None,
        conversation_id: str | None = None,
        budget: Budget | None = None,
        limits: Limits | None = None,
        ends_at: float | None = None,
        summaries: Summaries | None = None,
    ) -> None:
        self.agent = agent
        self.summaries = summaries
        """Where the conversation's views learn how this run's tools sum a call up."""
        self.transcript = transcript
        self.emit = emit
        self.settings = settings
        self.recorder: Recorder = recorder or MemoryRecorder()
        self.state = state if state is not None else {}
        self.pending_state: dict[str, Any] = {}
        self.depth = depth
        self.is_subagent = depth > 0
        self.model_override = model_override
        self.joins = joins
        self.submission_id = submission_id
        self.conversation_id = conversation_id
        self.sandbox: Any = parent_sandbox
        self._sandbox_tools = tools_cache if tools_cache is not None else {}
        self._workspace_skills: list[Skill] | None = None
        self._framework: dict[Any, list[Tool]] = {}
        self.rendered: Rendered | None = None
        self.lifecycle = Lifecycle(self.recorder, submission_id or "task", agent.name)
        """Lifecycle callbacks, each run once per submission (a task: per its call's records)."""
        self.model: Model | None = None
        self.tools: list[Tool] = []
        self.turn = sum(
            1
            for m, sid in zip(transcript.messages, transcript.sids)
            if isinstance(m, AssistantMessage) and sid == submission_id
        )
        """Responses this submission has had (counted from the window on recovery)."""
        self.max_turns = max_turns if max_turns is not None else agent.max_turns
        """Model calls this run may make before it fails with `turn_limit_exceeded` (issue 12.9)."""
        self.budget = budget if budget is not None else self._recovered_budget(limits or agent.limits)
        """What this submission (with its subagents: they share it) has spent against its limits."""
        if budget is None and submission_id is not None:
            self.budget.on_lost = self._record_lost
        self.streaming: list[Any] = []
        """Parts of the response being streamed (what an abort keeps)."""
        self.ends_at = ends_at

    # --- rendering and the environment -------------------------------------------------------

    def _set_state(self, name: str, value: Any) -> None:
        self.state[name] = value
        self.pending_state[name] = value

    def _resolve(self, spec: Any) -> Model:
        if self.settings.resolve_model is not None:
            return self.settings.resolve_model(spec)
        from flue_nb.runtime.providers import resolve_model

        return resolve_model(spec)

    def _build_sandbox(self, spec: Any) -> Any:
        sandbox = spec if _is_sandbox(spec) else spec()
        if not _is_sandbox(sandbox):
            from flue_nb.runtime.errors import ConfigError

            raise ConfigError(f"use_sandbox() got {spec!r}, which is neither a sandbox nor a factory returning one")
        return sandbox

    def _tools_of(self, sandbox: Any) -> list[Tool]:
        key = id(sandbox)
        cached = self._sandbox_tools.get(key)
        if cached is None:
            from flue_nb.runtime.tools import tools_of

            cached = self._sandbox_tools[key] = tools_of(sandbox)
        return cached

    async def render(self) -> None:
        """Re-render the agent and bring tools, sandbox, prompt and signals up to date (9.3)."""
        rendered = render(self.agent, is_subagent=self.is_subagent, state=self.state, set_state=self._set_state)
        first = self.rendered is None
        self.rendered = rendered
        spec = rendered.model if rendered.model is not None else self.model_override
        self.model = self._resolve(spec)
        if not self.is_subagent:
            if rendered.sandbox is None:
                if self.sandbox is not None:
                    self._workspace_skills = None
                self.sandbox = None
            elif self.sandbox is None:
                # Built once per submission start (9.4); a different factory waits for the next one.
                self.sandbox = self._build_sandbox(rendered.sandbox)
                self._workspace_skills = None
        if self.sandbox is not None and self._workspace_skills is None:
            self._workspace_skills = await discover_workspace_skills(self.sandbox)
        skills = self._skills(rendered)
        framework = self._framework_tools(tuple(rendered.subagents), tuple(skills))
        sandbox_tools = self._tools_of(self.sandbox) if self.sandbox is not None else []
        # A required MCP server that cannot connect fails the submission here, before the model runs.
        check_mcp_servers(rendered.mcp)
        mcp_tools, unavailable = await mount_mcp(rendered.mcp, first=first)
        own = [*rendered.tools, *mcp_tools]
        guard = getattr(self.sandbox, "guard", None)
        if guard is not None:  # the kernel sandbox's approval rules cover every tool, not only its own
            own = guard(own)
        self.tools = assemble_tools(sandbox_tools, framework, own)
        if self.summaries is not None:
            self.summaries.add(self.tools)
        cwd = self.sandbox.cwd if self.sandbox is not None else None
        roster = make_roster(self.tools, skills, rendered.subagents, cwd)
        if unavailable:
            roster["mcp_unavailable"] = unavailable
        if self.transcript.system is None:
            self.transcript.system = await self._compose_system()
            self.transcript.roster = roster
            self.recorder.append([], extra=[("system", {"text": self.transcript.system, "roster": roster})])
            signals = unavailable_signals(None, roster)
        else:
            signals = diff_roster(self.transcript.roster, roster) + unavailable_signals(self.transcript.roster, roster)
        self.transcript.roster = roster
        if signals:
            self._add(signals, extra=[("event", {"roster": roster})])
            for s in signals:
                if s.signal_type in ("resources", "environment"):
                    self.emit(ev.Signal(signal_type=s.signal_type, text=s.text, changes=tuple(s.changes)))

    def _framework_tools(self, subagents: tuple[Any, ...], skills: tuple[Any, ...]) -> list[Tool]:
        # Rebuilt only when the rosters change: a fresh tool would rebuild its JSON schema.
        key = (subagents, skills)
        cached = self._framework.get(key)
        if cached is None:
            cached = [task_tool(subagents, self._run_task)]
            if skills:
                cached.append(activate_skill_tool(skills))
            if any(s.resources and s.source == "imported" for s in skills):
                cached.append(read_skill_resource_tool(skills))
            self._framework = {key: cached}
        return cached

    def _add(
        self,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        extra: list[tuple[str, dict[str, Any]]] | None = None,
    ) -> None:
        self.transcript.commit(self.recorder, messages, sid=self.submission_id, state=state, extra=extra or [])

    # --- the loop -----------------------------------------------------------------------------

    async def run(self) -> AssistantMessage:
        """Run turns until the model answers without tool calls; return that answer."""
        await self.render()
        await self._lifecycle("agent_start", "agent_start")
        resumed = await self._resume_unresolved()
        if resumed:
            self._add(resumed, state=self._flush_state())
        overflow_retried = False
        while True:
            self._check_turn_limit()
            await self._before_model_call()
            try:
                response = await self._call_model()
            except ContextOverflowError:
                if overflow_retried:
                    raise
                overflow_retried = True
                await self.compact("overflow")
                continue
            overflow_retried = False
            if response.stop_reason == "refusal":
                # Not kept: the API asks clients to drop a refused turn before continuing.
                self._end_turn(response)
                raise refusal_error(response)
            self._add([response])
            self._count(response)
            self._end_turn(response)
            if response.stop_reason == "max_tokens":
                self.emit(ev.Log(kind="answer_cut", message=_CUT))
            calls = response.tool_calls
            if not calls:
                if response.stop_reason == "pause_turn":
                    continue  # a long server-tool turn paused: sent back as it is, the API goes on
                if self.pending_state:
                    self._add([], state=self._flush_state())
                return response
            results = await self._run_tools(calls)
            self._add(results, state=self._flush_state())
            # The turn boundary: re-render (9.3), then let waiting messages join (10.3).
            await self.render()
            self._take_joins()

    def _end_turn(self, response: AssistantMessage) -> None:
        self.emit(
            ev.TurnEnd(
                turn=self.turn,
                turn_id=f"t{self.turn}",
                stop_reason=response.stop_reason,
                usage=response.usage,
                model=response.model,
                priced_as=response.priced_as,
            )
        )

    def _recovered_budget(self, limits: Limits) -> Budget:
        # A recovered submission starts from what its crashed attempts spent: their responses are
        # in the window, its subagents' in the steps of its `task` calls.
        budget = Budget(limits)
        if not limits or self.submission_id is None:
            return budget
        for m, sid in zip(self.transcript.messages, self.transcript.sids):
            if isinstance(m, AssistantMessage) and sid == self.submission_id:
                budget.add(m)
                for call in m.tool_calls:
                    if call.name == "task":
                        budget.add_all(step_responses(self.recorder.steps(call.id)))
        return budget

    def _record_lost(self, data: dict[str, Any]) -> None:
        # Kept with the submission so `status()` bills it; the budget in memory has it already,
        # so a store that cannot take it now (a lost lease) does not hide the provider's error.
        try:
            self.recorder.append([], extra=[("event", {"lost_call": data})])
        except Exception:  # noqa: BLE001
            pass

    def _count(self, response: AssistantMessage) -> None:
        # `call_model` counted the response against the budget; here the notes it leads to.
        for note in self.budget.notes():
            self.emit(ev.Log(kind="budget", message=note))

    def _check_turn_limit(self) -> None:
        if self.turn >= self.max_turns:
            who = f"subagent {self.agent.name!r}" if self.is_subagent else "this submission"
            raise TurnLimitExceededError(
                f"turn_limit_exceeded: {who} made {self.turn} model calls, its limit "
                f"(max_turns={self.max_turns}); raise it with @agent(max_turns=...) or "
                "`%%flue --max-turns N` if the work needs more, or look for a loop",
                max_turns=self.max_turns,
            )

    def _flush_state(self) -> dict[str, Any]:
        pending, self.pending_state = self.pending_state, {}
        return pending

    def _take_joins(self) -> None:
        if self.joins is None:
            return
        for msg in self.joins():
            self.emit(ev.MessageStart(role="user"))
            self.emit(ev.MessageEnd(role="user", text=msg.text, from_submission_id=msg.submission_id))

    async def _before_model_call(self) -> None:
        from flue_nb.runtime.core.compaction import CompactionConfig, should_compact

        assert self.rendered is not None and self.model is not None
        # A model that learns its window from its server (OpenAI-compatible ones) asks it once
        # here, so compaction, overflow recovery and the gauge budget the real window.
        prepare = getattr(self.model, "prepare", None)
        if prepare is not None:
            await prepare()
        cfg = self.rendered.compaction
        if cfg is False or _paused(self.transcript.messages):
            # A paused server-tool turn goes back at once, as the last message and unchanged:
            # a fold now would replace the prompt the API is still working on.
            return
        config = cfg if isinstance(cfg, CompactionConfig) else None
        used = self.used_tokens()
        if should_compact(used, self.model.info, config):
            await self.compact("threshold")

    def used_tokens(self) -> int:
        """Tokens the window occupies now (contract 13.3)."""
        return int(self.settings.tokens().used_tokens(self.transcript.messages, system=self.transcript.system or ""))

    def _skills(self, rendered: Rendered) -> list[Skill]:
        if self.sandbox is None:
            return list(rendered.skills)
        return [*rendered.skills, *(self._workspace_skills or [])]

    async def _compose_system(self) -> str:
        rendered = self.rendered
        assert rendered is not None
        env = await describe_environment(self.sandbox) if self.sandbox is not None else None
        return compose_system(rendered.instructions, env, self._skills(rendered), rendered.subagents)

    async def compact(self, reason: CompactionReason) -> bool:
        """Fold older messages into a summary (contract 13); False when nothing could be folded."""
        from flue_nb.runtime.core.compaction import CompactionConfig

        assert self.rendered is not None and self.model is not None
        cfg = self.rendered.compaction
        job = CompactionJob(
            transcript=self.transcript,
            model=self.model,
            config=cfg if isinstance(cfg, CompactionConfig) else CompactionConfig(),
            counter=self.settings.tokens(),
            call_model=self.call_model,
            resolve=self._resolve,
            recompose=self._compose_system,
            recorder=self.recorder,
            emit=self.emit,
        )
        return await compact_window(job, reason)

    def _request(self) -> ModelRequest:
        assert self.model is not None
        return ModelRequest(self.transcript.system or "", self.transcript.messages, [t.spec() for t in self.tools])

    async def _call_model(self) -> AssistantMessage:
        """Stream the next response of the conversation, as turns observers see."""
        assert self.model is not None
        turn = self.turn + 1
        await self._lifecycle(f"response_start:{turn}", "response_start")
        response = await self.call_model(self._request(), self.model, visible=True)
        for value in await self._lifecycle(f"response_finish:{turn}", "response_finish", response):
            if value:
                response.metadata = {**(response.metadata or {}), **value}
        return response

    async def _lifecycle(self, name: str, moment: str, *args: Any) -> list[Any]:
        fns = self.rendered.lifecycle.get(moment) if self.rendered is not None else None
        return await self.lifecycle.run(name, moment, fns, *args) if fns else []

    def _subagent_run(
        self, sub: Any, *, transcript: Transcript, emit: Emit, recorder: Recorder, depth: int, sandbox: Any
    ) -> AgentRun:
        return AgentRun(
            sub.agent,
            transcript=transcript,
            emit=emit,
            settings=self.settings,
            recorder=recorder,
            depth=depth,
            parent_sandbox=sandbox,
            model_override=sub.model if sub.model is not None else self.model,
            tools_cache=self._sandbox_tools if sandbox is self.sandbox else None,
            conversation_id=self.conversation_id,
            budget=self.budget,
            ends_at=self.ends_at,
            summaries=self.summaries,
        )

    def aborted_message(self) -> AssistantMessage | None:
        """What had streamed when the run was cut off, as an aborted message (or None)."""
        if not self.streaming:
            return None
        return AssistantMessage(list(self.streaming), aborted=True, stop_reason="aborted")


def _paused(messages: Sequence[Message]) -> bool:
    last = messages[-1] if messages else None
    return isinstance(last, AssistantMessage) and last.stop_reason == "pause_turn"
