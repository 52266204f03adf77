"""A chat's Stop for an outside call whose code holds the kernel's main thread (issue 24.3).

The widget's `stop` message travels on the shell channel, which the main thread serves, and that
thread is running the call: the message would be read only once the call had ended. So while a
call holds the thread, a chat on its conversation shows which (`ChatWidget.holding`, set as the
call takes the thread, before its code runs), and its Stop sends `flue_stop_request {call_id}`
on the kernel's *control* channel, which ipykernel serves on a thread of its own. The handler
interrupts that call only if it still holds the main thread (`_main_thread.stop`, decided under
the lock the call's release takes), then aborts its conversation durably as Stop does. A
request for a call that has ended stops nothing and the reply says so (the chat then sends its
usual `stop`). Unlike the kernel's interrupt (SIGINT to whatever runs now), it names the call,
so it can never land in a user's cell that started meanwhile. When the calls are made for a
conversation run elsewhere (an attached `flue-nb acp`: `serve(shown_in=...)`), that
conversation's chats are told too, and their Stop aborts it first, durably, so its run ends
rather than going on with the interrupted call's result.
"""

from __future__ import annotations

import contextvars
import functools
import sys
from typing import TYPE_CHECKING, Any

from flue_nb.notebook.serve import _main_thread

if TYPE_CHECKING:
    from flue_nb.notebook.views.chat.wire import StopReply

__all__ = ["REPLY", "REQUEST", "STOPPED", "install", "stop_call"]

REQUEST = "flue_stop_request"
REPLY = "flue_stop_reply"
STOPPED = "stopped from the chat (Stop) while this call ran"

_recorder: Any = None
"""The `Recorder` of the server this kernel runs (its sessions are the ones Stop aborts)."""


def install(recorder: Any) -> None:
    """Answer `flue_stop_request` on this kernel's control channel; tell chats what holds the thread."""
    global _recorder
    _recorder = recorder
    _main_thread.listen(_show)
    kernel = _kernel()
    handlers = getattr(kernel, "control_handlers", None)
    if isinstance(handlers, dict):
        handlers[REQUEST] = functools.partial(_on_request, kernel)


def stop_call(call_id: str) -> bool:
    """Stop the outside call `call_id` if it holds the main thread now; True if it did."""
    held = _main_thread.holding()
    if held is None or held.call_id != call_id:
        return False
    recorder = _recorder
    session = recorder.session_of(held.conversation_id) if recorder is not None and held.conversation_id else None
    shown_in = getattr(recorder, "shown_in", None) if session is not None else None
    if session is not None and shown_in:
        # Before the interrupt: the run elsewhere must not go on with the interrupted call's result.
        from flue_nb.runtime.session import open_conversation

        try:
            open_conversation(shown_in, db=session.store).abort()  # its owner stops it within a second
        except Exception:  # noqa: BLE001 - the call is still stopped; the chat's own stop can follow
            pass
    if not _main_thread.stop(call_id, STOPPED):
        return False
    if session is not None:
        try:
            session.abort()  # durable, and the calls queued behind it go too, as on Stop
        except Exception:  # noqa: BLE001 - the interrupt has stopped the call; the chat's stop follows
            pass
    return True


def _on_request(kernel: Any, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
    """ipykernel's control handler (its control thread): stop the named call, reply whether it did."""
    content = parent.get("content")  # `wire.StopRequest`, not trusted until checked
    call_id = content.get("call_id") if isinstance(content, dict) else None
    reply: StopReply
    if not isinstance(call_id, str) or not call_id:
        reply = {"status": "error", "stopped": False, "message": f"{REQUEST} needs `call_id`, a non-empty string"}
    else:
        reply = {"status": "ok", "stopped": stop_call(call_id)}
    kernel.session.send(stream, REPLY, reply, parent, ident=ident)


def _show(held: _main_thread.Held) -> None:
    """Tell each chat on the call's conversation that it holds the main thread, or no longer."""
    widget_module = sys.modules.get("flue_nb.notebook.views.chat.widget")
    if widget_module is None:
        return  # no chat was ever opened here (and importing ipywidgets per call would cost ~1 s once)
    open_widgets = widget_module.open_widgets
    value = held.call_id if held.running else ""
    recorder = _recorder
    shown = {held.conversation_id}
    if recorder is not None and held.conversation_id and recorder.session_of(held.conversation_id) is not None:
        shown.add(getattr(recorder, "shown_in", None))
    shown.discard(None)
    for widget in open_widgets():
        if widget.mode == "chat" and getattr(widget.session, "conversation_id", None) in shown:
            # An empty context, as the widget's own updates: no cell's output owns this one.
            contextvars.Context().run(widget.show_holding, value)


def _kernel() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None)
