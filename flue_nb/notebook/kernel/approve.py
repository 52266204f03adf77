"""Who answers the `ask` approval policy in a notebook: a chat, stdin, or another kernel's view.

`notebook_approver` is the `Approver` the kernel sandbox uses. It asks, in order:
1. every view in this kernel that shows the tool call (the chat widgets, which register with
   `asked_in_views`): its card gets Approve / Deny and the run waits for the click;
2. else the person running the cell, through the kernel's stdin (an `input()` prompt under the
   cell), when a cell is blocked waiting for the run and its frontend accepts input;
3. else no one here: it returns `Unanswered` saying why, and the approval wrapper applies the
   fallback policy and says which one in the tool's result.
When the request is recorded in the store (`request.ballot`), a chat of the conversation in
another kernel offers it too, and its answer is waited for alongside 1 and 2 (with no one here,
for `approval_timeout` when one is set). The first answer wins; a prompt still open here is
taken down.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import Any

from flue_nb.runtime.coordinator import coordinator
from flue_nb.runtime.tools.approval import ApprovalRequest, Unanswered

__all__ = [
    "NO_ONE",
    "always_allow",
    "asked_in_views",
    "default_approver",
    "notebook_approver",
    "offered",
    "prompts",
    "use_host_approver",
]

NO_ONE = "this kernel: no chat widget shows the call, and no cell is waiting with a frontend that accepts input"


class _NoStdin(Exception):
    """Stdin cannot be used for this question (wrong thread, or the frontend refuses input)."""


_prompts = 0

_offered: dict[str, Any] = {}
"""call id -> the grant the rules offer for a call being asked about here (`ApprovalRequest.grant`)."""

_host: list[Any] = []
"""Who answers `ask` outside a Jupyter kernel, when a host process says (`flue-nb acp`: its client)."""

_views: list[Callable[[], list[Any]]] = []
"""Where the views that can answer live (the chat widget registers its open widgets when it
is first imported: no widget module loaded, no widget to ask)."""


def asked_in_views(views: Callable[[], list[Any]]) -> None:
    """Register `views()`: the views alive now, each asked about a call it `shows`."""
    _views.append(views)


def prompts() -> int:
    """How many stdin prompts this kernel has shown: a cell that saw one clears the frontend's
    echo of the answer (or a box an interrupt left) when it ends."""
    return _prompts


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
    global _prompts
    _prompts += 1
    try:
        answer = input(f"flue: allow {request.question}? [y/N] ")
    except (StdinNotImplementedError, EOFError, OSError) as exc:
        raise _NoStdin(str(exc)) from None
    return answer.strip().lower() in ("y", "yes")


async def notebook_approver(request: ApprovalRequest, *, timeout: float | None = None) -> Any:
    """Ask every chat showing the call (the first answer wins), else stdin, else say no one could
    be asked; past `timeout` seconds with no answer from a chat, the fallback policy applies."""
    if request.grant is not None:
        _offered[request.call_id] = request.grant
    try:
        return await _notebook_approver(request, timeout=timeout)
    finally:
        _offered.pop(request.call_id, None)


def offered(call_id: str) -> Any:
    """The grant "always allow this for this conversation" would give for the call being asked
    about here (a `Grant`), or None when none is offered."""
    return _offered.get(call_id)


def always_allow(call_id: str, session: Any) -> Any:
    """A chat's "always allow this for this conversation" on the call it is asked about: keep the
    grant the rules offered for it with the conversation (None when none is offered)."""
    offered = _offered.get(call_id)
    if offered is None:
        return None
    session.allow(offered.tool, offered.pattern)
    return offered


async def _notebook_approver(request: ApprovalRequest, *, timeout: float | None) -> Any:
    widgets = [w for views in _views for w in views()]
    showing = [w for w in widgets if w.shows(request.call_id)]
    asked = [w for w in showing if w.interactive]
    ballot = request.ballot
    if asked:
        return await _first_answer(asked, request, timeout)
    shown = showing[0] if showing else None  # a blocking cell's view: it points to the prompt
    if shown is not None:
        shown.asking(request.call_id, request.question)
    try:
        prompt = asyncio.ensure_future(coordinator().run_on_waiter(lambda: _prompt(request)))
        elsewhere = asyncio.ensure_future(ballot.wait()) if ballot is not None else None
        try:
            done, _ = await asyncio.wait(
                [t for t in (prompt, elsewhere) if t is not None], return_when=asyncio.FIRST_COMPLETED
            )
            if prompt in done and not isinstance(prompt.exception(), _NoStdin):
                return prompt.result()
            if elsewhere is None or (elsewhere not in done and not timeout):
                return Unanswered(NO_ONE)  # nobody here, and no time given to wait for another view
            won = await asyncio.wait_for(asyncio.shield(elsewhere), timeout or None)
        except asyncio.TimeoutError:
            return Unanswered(f"time (nobody answered within {timeout:g} s in any view)")
        finally:
            for task in (prompt, elsewhere):
                if task is not None and not task.done():
                    task.cancel()  # an `input()` still open is interrupted: no stale box is left
        return won.decision
    finally:
        if shown is not None:
            shown.asking(request.call_id, None)


async def _first_answer(widgets: list[Any], request: ApprovalRequest, timeout: float | None) -> Any:
    """Approve / Deny in every view of the call (and in other kernels' views, through the store);
    the first answer decides and the others follow."""
    asks = [asyncio.ensure_future(w.ask(request.call_id, request.question)) for w in widgets]
    elsewhere = asyncio.ensure_future(request.ballot.wait()) if request.ballot is not None else None
    racing = [*asks, *([elsewhere] if elsewhere is not None else [])]
    try:
        done, _ = await asyncio.wait(racing, timeout=timeout or None, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        for task in racing:
            task.cancel()
        raise
    if elsewhere is not None and not elsewhere.done():
        elsewhere.cancel()
    if not done:
        for task in asks:
            task.cancel()  # each card stops offering the buttons; the result tells the rest
        return Unanswered(f"time (nobody answered within {timeout:g} s in any view)")
    if elsewhere is not None and elsewhere in done:
        answer = elsewhere.result().decision
    else:
        answer = bool(next(t for t in done if t is not elsewhere).result())
        if request.ballot is not None:
            # This click against one from another kernel: the store says which came first (the
            # ballot closes once; the approval wrapper reads the same outcome from it).
            won = await asyncio.to_thread(request.ballot.decide, answer)
            answer = answer if won is None else won.decision
    for widget in widgets:
        if isinstance(answer, bool):
            widget.answer(request.call_id, answer)  # the other views take the same answer
    for task in asks:
        if not task.done() and not isinstance(answer, bool):
            task.cancel()
    await asyncio.gather(*asks, return_exceptions=True)
    return answer


def use_host_approver(approver: Any) -> Callable[[], None]:
    """Outside a Jupyter kernel, let `approver` answer `ask` for sandboxes built without one (the
    ACP agent's client); returns the function that takes it back."""
    _host.append(approver)
    return lambda: _host.remove(approver)


def default_approver(timeout: float | None = None) -> Any:
    """`notebook_approver` (waiting at most `timeout` s for a chat's answer) inside a Jupyter
    kernel; elsewhere the host's approver (`use_host_approver`), else None (a headless run)."""
    import sys

    host = _host[-1] if _host else None
    if "ipykernel" not in sys.modules:
        return host
    from ipykernel.kernelbase import Kernel

    if not Kernel.initialized():
        return host
    return notebook_approver if not timeout else functools.partial(notebook_approver, timeout=timeout)
