"""Who answers the `ask` approval policy in a notebook: the chat widget, else the kernel's stdin.

`notebook_approver` is the `Approver` the kernel sandbox uses. It asks, in order:
1. a chat widget in this kernel that shows the tool call (its card gets Approve / Deny and the
   run waits for the click);
2. the person running the cell, through the kernel's stdin (an `input()` prompt under the cell),
   when a cell is blocked waiting for the run and its frontend accepts input;
3. no one: it returns `Unanswered` saying why, and the approval wrapper applies the fallback
   policy and says which one in the tool's result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
from typing import Any

from flue_nb.runtime.coordinator import coordinator
from flue_nb.runtime.tools.approval import ApprovalRequest, Unanswered

__all__ = ["NO_ONE", "default_approver", "notebook_approver"]

NO_ONE = "this kernel: no chat widget shows the call, and no cell is waiting with a frontend that accepts input"


class _NoStdin(Exception):
    """Stdin cannot be used for this question (wrong thread, or the frontend refuses input)."""


def _prompt(request: ApprovalRequest) -> bool:
    """Ask on stdin; runs on the kernel's main thread while a `%%flue` cell waits."""
    if threading.current_thread() is not threading.main_thread():
        raise _NoStdin("not on the kernel's main thread")
    from IPython.core.error import StdinNotImplementedError

    try:
        from ipykernel.kernelbase import Kernel

        if Kernel.initialized() and not getattr(Kernel.instance(), "_allow_stdin", False):
            raise _NoStdin("the frontend does not accept input")
    except ImportError:  # plain IPython: input() reads the terminal
        pass
    try:
        answer = input(f"flue: allow {request.summary}? [y/N] ")
    except (StdinNotImplementedError, EOFError, OSError) as exc:
        raise _NoStdin(str(exc)) from None
    return answer.strip().lower() in ("y", "yes")


async def notebook_approver(request: ApprovalRequest, *, timeout: float | None = None) -> Any:
    """Ask every chat showing the call (the first answer wins), else stdin, else say no one could
    be asked; past `timeout` seconds with no answer from a chat, the fallback policy applies."""
    if request.tool_name == "edit_cell":  # the person decides on the change: show it as a diff
        from flue_nb.notebook.cells.write import approval_summary

        summary = await approval_summary(request.tool_name, request.input, request.summary, _user_ns())
        request = dataclasses.replace(request, summary=summary)
    try:
        from flue_nb.notebook.chat.widget import open_widgets
    except ImportError:  # anywidget missing (a damaged environment): no widget can show the call
        widgets = []
    else:
        widgets = open_widgets()
    showing = [w for w in widgets if w.shows(request.call_id)]
    asked = [w for w in showing if w.interactive]
    if asked:
        return await _first_answer(asked, request, timeout)
    shown = showing[0] if showing else None  # a blocking cell's view: it points to the prompt
    if shown is not None:
        shown.asking(request.call_id, request.summary)
    try:
        return await coordinator().run_on_waiter(lambda: _prompt(request))
    except _NoStdin:
        return Unanswered(NO_ONE)
    finally:
        if shown is not None:
            shown.asking(request.call_id, None)


def _user_ns() -> dict[str, Any]:
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else {}


async def _first_answer(widgets: list[Any], request: ApprovalRequest, timeout: float | None) -> Any:
    """Approve / Deny in every view of the call; the first click decides and the others follow."""
    asks = [asyncio.ensure_future(w.ask(request.call_id, request.summary)) for w in widgets]
    try:
        done, _ = await asyncio.wait(asks, timeout=timeout or None, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        for task in asks:
            task.cancel()
        raise
    if not done:
        for task in asks:
            task.cancel()  # each card stops offering the buttons; the result tells the rest
        return Unanswered(f"time (nobody answered within {timeout:g} s in this kernel's chats)")
    approved = bool(next(iter(done)).result())
    for widget in widgets:
        widget.answer(request.call_id, approved)  # the other views take the same answer
    await asyncio.gather(*asks, return_exceptions=True)
    return approved


def default_approver(timeout: float | None = None) -> Any:
    """`notebook_approver` (waiting at most `timeout` s for a chat's answer) inside a Jupyter
    kernel; None (a headless run) anywhere else."""
    import sys

    if "ipykernel" not in sys.modules:
        return None
    from ipykernel.kernelbase import Kernel

    if not Kernel.initialized():
        return None
    return notebook_approver if not timeout else functools.partial(notebook_approver, timeout=timeout)
