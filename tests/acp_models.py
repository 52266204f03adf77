"""Offline models for `flue-nb acp` in a subprocess (`--model acp_models:model`): each answer
depends only on the request, so a fresh process (a `session/load`) answers the same."""

from __future__ import annotations

import asyncio
from typing import Any

import flue_nb
from flue_nb.models import FunctionModel, fail, reply, tool_call


async def _answer(request: Any) -> Any:
    last = request.messages[-1]
    if last.kind == "tool_result" and last.name == "python" and "Aborted in the notebook" in last.content:
        await asyncio.sleep(300)  # a model that would go on: only the conversation's abort ends this
        return reply("never")
    if last.kind == "tool_result" and last.name == "python":
        return reply(
            "Refused in the kernel." if last.is_error else f"The kernel ran it: {last.content.strip().splitlines()[0]}"
        )
    if last.kind == "tool_result" and last.name.startswith("mcp__"):
        return reply(f"The sum is {last.content}.")
    if last.kind == "tool_result":
        return reply("Refused, so nothing was written." if last.is_error else "Wrote note.txt.")
    text = last.text if last.kind == "user" else ""
    if "hold the kernel" in text:
        return reply("", tool_call("python", code="import time\ntime.sleep(120)"))
    if "in the kernel" in text:  # an attached session: the kernel's own `python` tool
        return reply("Running it.", tool_call("python", code="answer = 6 * 7\nprint(answer)"))
    if "write" in text:
        return reply("Writing it.", tool_call("write", path="note.txt", content="hello from acp\n"))
    if "add" in text:
        return reply("", tool_call("mcp__my_calc__add", a=2, b=3))
    if "fail" in text:
        return fail("invalid_request", "scripted refusal", status=400)
    if "wait" in text:
        await asyncio.sleep(300)  # only a cancel ends this
        return reply("never")
    return reply("Hi there.", thinking="A greeting; answer briefly.")


model = FunctionModel(_answer, id="acp-offline")


@flue_nb.agent
def own_agent() -> str:
    """An agent of the user's own (`--agent acp_models:own_agent`): its kernel sandbox asks."""
    flue_nb.use_model(model)
    flue_nb.use_sandbox(lambda: flue_nb.kernel(namespace={}, approval="ask", sandbox="none"))
    return "You are the user's own agent."
