"""The turn loop: render → compose → stream the model → run tool calls concurrently → repeat.

`AgentRun` is one response of one agent: the top-level run of a submission (durable, with joins)
or a subagent's run (ephemeral). What differs is injected: the recorder, the joins source and
the event callback. The loop ends at an answer without tool calls.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from flue_nb.runtime import events as ev
from flue_nb.runtime.agent import AgentDef
from flue_nb.runtime.agent.framework import (
    TaskInput,
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
from flue_nb.runtime.core.delegation import scoped
from flue_nb.runtime.core.lifecycle import Lifecycle
from flue_nb.runtime.core.task_record import TaskRecorder, step_responses
from flue_nb.runtime.core.transcript import MemoryRecorder, Recorder, Transcript
from flue_nb.runtime.errors import (
    ContextOverflowError,
    DelegationDepthExceededError,
    ModelRefusedError,
    ProviderError,
    SubmissionAbortedError,
    TurnLimitExceededError,
)
from flue_nb.runtime.events import CompactionReason, Emit, ErrorInfo, ToolCallInfo
from flue_nb.runtime.images import cap_images
from flue_nb.runtime.messages import AssistantMessage, Message, TextPart, ThinkingPart, ToolResultMessage, UserMessage
from flue_nb.runtime.providers.model import (
    Model,
    ModelRequest,
    ResponseDone,
    TextChunk,
    ThinkingChunk,
    ToolCallDelta,
    provider_of,
)
from flue_nb.runtime.sandbox import Sandbox
from flue_nb.runtime.text import clean_response
from flue_nb.runtime.tools.mcp import mount_mcp, unavailable_signals
from flue_nb.runtime.tools.tool import Step, Tool, ToolContext, ToolOutput, execute_tool

__all__ = ["MAX_DEPTH", "AgentRun", "Emit", "RunSettings"]

MAX_DEPTH = 4
MAX_TRANSIENT_RETRIES = 3
PARTIAL_EVERY = 0.25
"""Seconds between durable snapshots of a streaming response (what a crash can keep)."""

JoinSource = Callable[[], "list[UserMessage]"]
"""Commits the messages waiting to join (store and window) and returns them."""


@dataclass(slots=True)
class RunSettings:
    """Seams and knobs shared by a run and its subagents."""

    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    clock: Callable[[], float] = time.time
    rng: random.Random = field(default_factory=random.Random)
    resolve_model: Callable[[Any], Model] | None = None
    model_call_timeout: float = 600.0
    """Seconds one model call may take in all, its retries and their backoff included (a hung
    provider costs ~120 s a try); past it the submission fails instead of trying again."""
    counter: Any = None
    """A `TokenCounter` shared by the conversation's runs (made on first use)."""

    def tokens(self) -> Any:
        """The shared token counter."""
        if self.counter is None:
            from flue_nb.runtime.core.tokens import TokenCounter

            self.counter = TokenCounter()
        return self.counter


def _is_sandbox(obj: Any) -> bool:
    return isinstance(obj, Sandbox)


class AgentRun:
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
    ) -> None:
        self.agent = agent
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
        self.streaming: list[Any] = []
        """Parts of the response being streamed (what an abort keeps)."""

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
        mcp_tools, unavailable = await mount_mcp(rendered.mcp, first=first)
        self.tools = assemble_tools(sandbox_tools, framework, [*rendered.tools, *mcp_tools])
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
        await self._resume_unresolved()
        overflow_retried = False
        while True:
            self._check_turn_limit()
            self.budget.check(f"subagent {self.agent.name!r}" if self.is_subagent else "this submission")
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
                raise _refusal(response)
            self._add([response])
            self._count(response)
            self._end_turn(response)
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

    def _count(self, response: AssistantMessage) -> None:
        self.budget.add(response)
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
        if cfg is False:
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

    async def call_model(self, request: ModelRequest, model: Model, *, visible: bool = False) -> AssistantMessage:
        """One model call, retrying transient provider errors with backoff (11.3).

        `visible` calls are turns of the conversation: they emit turn and message events, stream
        text deltas and keep durable snapshots of the partial response. Other calls (the
        compaction summary) are quiet: their text is never shown as the answer.
        """
        failures = 0
        limit = self.settings.model_call_timeout
        deadline = time.monotonic() + limit
        while True:
            try:
                call = _collect(model, request) if not visible else self._stream(request, model)
                return await asyncio.wait_for(call, max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                if time.monotonic() < deadline:
                    raise  # a timeout of the model's own, not this call's deadline
                raise ProviderError(
                    f"the model gave no complete response within {limit:g} s, {failures + 1} "
                    f"tr{'y' if failures == 0 else 'ies'} included; the provider may be hung or overloaded. "
                    "Try again later (the limit is the run's `model_call_timeout`).",
                    kind="timeout",
                    final=True,
                ) from None
            except ProviderError as exc:
                if not exc.transient or failures >= MAX_TRANSIENT_RETRIES:
                    raise
                failures += 1
                delay = 2.0 * 2 ** (failures - 1) * (0.8 + 0.4 * self.settings.rng.random())
                if time.monotonic() + delay >= deadline:
                    raise  # no time left for another try: the error as it is
                self.emit(
                    ev.Log(
                        kind="retry",
                        message=f"provider error ({exc.kind}); retry {failures} of {MAX_TRANSIENT_RETRIES} in {delay:.1f}s",
                        error=ErrorInfo(exc.type, exc.message),
                    )
                )
                await self.settings.sleep(delay)

    async def _stream(self, request: ModelRequest, model: Model) -> AssistantMessage:
        turn = self.turn + 1
        turn_id = f"t{turn}"
        self.emit(ev.TurnStart(turn=turn, turn_id=turn_id, model=model.info.id, provider=provider_of(model)))
        self.emit(ev.MessageStart(role="assistant", turn_id=turn_id))
        self.streaming = []
        text: list[str] = []
        thinking: list[str] = []
        last_snapshot = self.settings.clock()
        stream_id = f"{self.submission_id}:{turn}:{id(request)}:{last_snapshot}"
        done: AssistantMessage | None = None
        try:
            async for part in model.stream(request):
                if isinstance(part, TextChunk):
                    text.append(part.text)
                    self.emit(ev.TextDelta(delta=part.text, turn_id=turn_id))
                elif isinstance(part, ThinkingChunk):
                    thinking.append(part.thinking)
                    self.emit(ev.ThinkingDelta(delta=part.thinking, turn_id=turn_id))
                elif isinstance(part, ToolCallDelta):
                    self.emit(
                        ev.Log(
                            kind="tool_call_streaming",
                            message=f"the model is writing a `{part.name}` call",
                            call_id=part.id,
                            name=part.name,
                            turn_id=turn_id,
                        )
                    )
                elif isinstance(part, ResponseDone):
                    done = clean_response(part.message)  # always storable (runtime._text)
                self.streaming = [ThinkingPart("".join(thinking))] if thinking else []
                if text:
                    self.streaming.append(TextPart("".join(text)))
                now = self.settings.clock()
                if now - last_snapshot >= PARTIAL_EVERY and self.streaming:
                    last_snapshot = now
                    self.recorder.partial(
                        {"text": "".join(text), "thinking": "".join(thinking), "stream_id": stream_id}
                    )
        finally:
            if text or thinking:
                self.recorder.partial(None)
        if done is None:
            raise ProviderError("the model's stream ended without a complete response", kind="connection")
        self.streaming = []
        self.turn = turn
        self.emit(
            ev.MessageEnd(
                role="assistant",
                turn_id=turn_id,
                text=done.text,
                tool_calls=tuple(ToolCallInfo(c.id, c.name, c.input) for c in done.tool_calls),
                usage=done.usage,
            )
        )
        return done

    def aborted_message(self) -> AssistantMessage | None:
        """What had streamed when the run was cut off, as an aborted message (or None)."""
        if not self.streaming:
            return None
        return AssistantMessage(list(self.streaming), aborted=True, stop_reason="aborted")

    # --- tools --------------------------------------------------------------------------------

    async def _resume_unresolved(self) -> None:
        """After a crash: keep recorded results, re-run durable tools, mark the rest unknown (11.2)."""
        calls = self.transcript.unresolved_calls()
        if not calls:
            return
        by_name = {t.name: t for t in self.tools}
        results = []
        for call in calls:
            tool = by_name.get(call.name)
            if tool is not None and tool.durable:
                results.append(await self._run_one(call, by_name))
            else:
                results.append(
                    ToolResultMessage(
                        call.id,
                        call.name,
                        "Interrupted: the run stopped while this tool call was in progress; its outcome is "
                        "unknown. Check the state before retrying it.",
                        is_error=True,
                    )
                )
        self._add(results, state=self._flush_state())

    async def _run_tools(self, calls: list[Any]) -> list[ToolResultMessage]:
        by_name = {t.name: t for t in self.tools}
        tasks = [asyncio.ensure_future(self._run_one(c, by_name)) for c in calls]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _run_one(self, call: Any, by_name: dict[str, Tool]) -> ToolResultMessage:
        started = time.perf_counter()
        self.emit(ev.ToolStart(call_id=call.id, name=call.name, input=call.input))
        tool = by_name.get(call.name)
        if tool is None:
            names = ", ".join(f"`{n}`" for n in by_name)
            out = ToolOutput(f"Unknown tool `{call.name}`. Available tools: {names}.", is_error=True)
        else:
            step = None
            if tool.durable:
                step = Step(self.recorder.steps(call.id), lambda name, value: self.recorder.step(call.id, name, value))

            def report(progress: float | None, total: float | None, message: str | None) -> None:
                self.emit(
                    ev.ToolUpdate(call_id=call.id, name=call.name, progress=progress, total=total, message=message)
                )

            ctx = ToolContext(call.id, self.sandbox, step, self.conversation_id, self.submission_id, report=report)
            try:
                out = await execute_tool(tool, call.input, ctx)
            except BaseException as exc:
                # Aborted or failed underneath the tool: observers still see the call end.
                reason: Literal["aborted", "failed"] = (
                    "aborted" if isinstance(exc, (asyncio.CancelledError, SubmissionAbortedError)) else "failed"
                )
                self.emit(
                    ev.ToolEnd(
                        call_id=call.id,
                        name=call.name,
                        is_error=True,
                        content=f"({reason})",
                        ended=reason,
                        duration_ms=round((time.perf_counter() - started) * 1000, 3),
                    )
                )
                raise
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        content, images = cap_images(out.content, list(out.images))
        self.emit(
            ev.ToolEnd(
                call_id=call.id,
                name=call.name,
                is_error=out.is_error,
                content=content,
                details=out.details,
                duration_ms=duration_ms,
                images=tuple(images),
            )
        )
        return ToolResultMessage(
            call.id, call.name, content, out.is_error, details=out.details, duration_ms=duration_ms, images=images
        )

    # --- delegation ---------------------------------------------------------------------------

    async def _run_task(self, args: TaskInput, ctx: ToolContext) -> str:
        """Run the named subagent one level deeper and return its final text (14.1, 14.2)."""
        assert self.rendered is not None
        depth = self.depth + 1
        if depth > MAX_DEPTH:
            raise DelegationDepthExceededError(
                f"delegation_depth_exceeded: a task chain may be at most {MAX_DEPTH} deep; do this "
                "part yourself instead of delegating it"
            )
        sub = next(s for s in self.rendered.subagents if s.name == args.agent)
        sandbox = scoped(self.sandbox, args.cwd)
        task_id = ctx.call_id
        parent_emit = self.emit

        def emit(event: ev.Event) -> ev.Event:
            if event.task_id is None:
                object.__setattr__(event, "task_id", task_id)
            return parent_emit(event)

        parent_emit(ev.TaskStart(task_id=task_id, agent=sub.name, description=args.description, depth=depth))
        # Durable (contract 11.2): the child's records are steps of this call, so a crash
        # resumes the child where its records end (or returns the answer it already gave).
        recorder = TaskRecorder(self.recorder, task_id)
        transcript = Transcript()
        resumed = recorder.restore(transcript)
        done = TaskRecorder.finished(transcript) if resumed else None
        if done is not None:
            parent_emit(ev.TaskEnd(task_id=task_id, agent=sub.name, text=done.text))
            return done.text or "(the subagent finished without a text answer)"
        child = AgentRun(
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
        )
        if not resumed:
            child.transcript.commit(recorder, [UserMessage(args.prompt)], sid=None)
        try:
            answer = await child.run()
        except BaseException as exc:
            parent_emit(ev.TaskEnd(task_id=task_id, agent=sub.name, is_error=True, error=str(exc)))
            raise
        parent_emit(ev.TaskEnd(task_id=task_id, agent=sub.name, text=answer.text))
        return answer.text or "(the subagent finished without a text answer)"


def _refusal(response: AssistantMessage) -> ModelRefusedError:
    """The error for a response the model refused, with the API's category and explanation."""
    details = response.stop_details or {}
    category, explanation = details.get("category"), details.get("explanation")
    why = f" (category `{category}`)" if category else ""
    said = f": {explanation}" if explanation else "; the API gave no explanation"
    return ModelRefusedError(
        f"{response.model or 'the model'} refused to answer{why}{said}. Rephrase the request "
        "or start a new conversation (`--new`): the refused message stays in this one.",
        category=category,
        explanation=explanation,
    )


async def _collect(model: Model, request: ModelRequest) -> AssistantMessage:
    """A model call whose stream nobody watches: only the final message counts."""
    async for part in model.stream(request):
        if isinstance(part, ResponseDone):
            return part.message
    raise ProviderError("the model's stream ended without a complete response", kind="connection")
