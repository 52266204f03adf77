"""A `task` call (contract 14): the named subagent runs one level deeper with a fresh context,
its records kept as steps of the call so a crash resumes it where they end."""

from __future__ import annotations

from typing import Any, Protocol

from flue_nb.runtime import events as ev
from flue_nb.runtime.agent.framework import TaskInput
from flue_nb.runtime.agent.hooks import Rendered
from flue_nb.runtime.core.delegation import scoped
from flue_nb.runtime.core.task_record import TaskRecorder
from flue_nb.runtime.core.transcript import Recorder, Transcript
from flue_nb.runtime.errors import DelegationDepthExceededError
from flue_nb.runtime.events import Emit
from flue_nb.runtime.messages import AssistantMessage, UserMessage
from flue_nb.runtime.redact import redact
from flue_nb.runtime.tools.tool import ToolContext

__all__ = ["MAX_DEPTH", "SubagentRun", "SubagentTasks"]

MAX_DEPTH = 4


class SubagentRun(Protocol):
    """What a task needs of the subagent's run."""

    transcript: Transcript

    async def run(self) -> AssistantMessage:
        """Run turns until the subagent answers without tool calls."""
        ...


class SubagentTasks:
    """The delegating half of `AgentRun` (what it needs of the run is declared here)."""

    emit: Emit
    recorder: Recorder
    rendered: Rendered | None
    depth: int
    sandbox: Any

    def _subagent_run(
        self, sub: Any, *, transcript: Transcript, emit: Emit, recorder: Recorder, depth: int, sandbox: Any
    ) -> SubagentRun:
        raise NotImplementedError  # AgentRun makes its own kind of run

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
        child = self._subagent_run(
            sub, transcript=transcript, emit=emit, recorder=recorder, depth=depth, sandbox=sandbox
        )
        if not resumed:
            child.transcript.commit(recorder, [UserMessage(args.prompt)], sid=None)
        try:
            answer = await child.run()
        except BaseException as exc:
            parent_emit(ev.TaskEnd(task_id=task_id, agent=sub.name, is_error=True, error=str(exc)))
            raise
        text = redact(answer.text) if answer.text else answer.text
        parent_emit(ev.TaskEnd(task_id=task_id, agent=sub.name, text=text))
        return text or "(the subagent finished without a text answer)"
