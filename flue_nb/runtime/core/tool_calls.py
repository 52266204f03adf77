"""Running a response's tool calls: concurrently, each with its events, durable steps and the
cap on its images; an abort or failure underneath a tool still ends its call for observers."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from flue_nb.runtime import events as ev
from flue_nb.runtime.core.task_record import TaskRecorder
from flue_nb.runtime.core.transcript import Recorder, Transcript
from flue_nb.runtime.errors import SubmissionAbortedError
from flue_nb.runtime.events import Emit
from flue_nb.runtime.images import cap_images
from flue_nb.runtime.messages import ToolResultMessage
from flue_nb.runtime.tools.tool import Step, Tool, ToolContext, ToolOutput, execute_tool

__all__ = ["ToolCalls"]


class ToolCalls:
    """The tool-running half of `AgentRun` (what it needs of the run is declared here)."""

    emit: Emit
    recorder: Recorder
    transcript: Transcript
    tools: list[Tool]
    sandbox: Any
    conversation_id: str | None
    submission_id: str | None
    is_subagent: bool

    async def _resume_unresolved(self) -> list[ToolResultMessage]:
        """After a crash: keep recorded results, re-run durable tools, mark the rest unknown (11.2).

        The results of the calls a crash left unanswered, for the run to commit (none: nothing to do).
        """
        calls = self.transcript.unresolved_calls()
        if not calls:
            return []
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
        return results

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

            # A run records to the store under its lease (a subagent's records are steps of the
            # top-level run's `task` call): an approval it asks for is recorded there too, under
            # that submission, so a chat of the conversation in another kernel can answer it.
            top = _top_recorder(self.recorder)
            store = getattr(top, "store", None)
            owner = getattr(top, "owner", None) if store is not None else None
            ctx = ToolContext(
                call.id, self.sandbox, step, self.conversation_id, self.submission_id,
                report=report, store=store, owner=owner,
                asked_for=getattr(top, "sid", None) if self.is_subagent and store is not None else None,
            )  # fmt: skip
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
                approval=out.approval,
                namespace=out.namespace,
            )
        )
        return ToolResultMessage(
            call.id, call.name, content, out.is_error, details=out.details, duration_ms=duration_ms, images=images,
            approval=out.approval, namespace=out.namespace,
        )  # fmt: skip


def _top_recorder(recorder: Recorder) -> Recorder:
    """The recorder of the top-level run a (nested) subagent's records end up in."""
    while isinstance(recorder, TaskRecorder):
        recorder = recorder.parent
    return recorder
