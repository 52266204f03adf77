"""How the cell log hears a cell: IPython's run-cell events, teed streams, display hooks.

While a cell runs, `sys.stdout`/`sys.stderr` are wrapped so each write is also recorded (only
writes from the thread running the cell: a background `python` call's output is not the cell's);
`display_pub.publish` and the displayhook's `write_format_data` are wrapped on the shell's own
instances, which works the same in ipykernel and terminal IPython. A cell the agent runs
(`run_cell`) is recorded but not echoed: its output reaches the person through the tool's line.
"""

from __future__ import annotations

import contextlib
import sys
from threading import get_ident
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flue_nb.notebook.celllog.log import CellLog, CellRecord

__all__ = ["Capture"]


class _Tee:
    """A stream that records into the running cell's buffer and passes everything on.

    It stays in place between cells (retargeted, not re-created, at each cell: the cheap path);
    only writes from the thread running the cell are recorded.
    """

    # No __slots__: IPython 9's `run_cell` patches `sys.stdout.write` on the instance for a cell.

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.target: Any = None
        """The running cell's `BoundedText` for this stream, or None between cells."""
        self.thread = 0
        self.forward = True
        self.paused = False
        """True while IPython prints its own `Out[N]:` prompt or a traceback."""

    def write(self, text: str) -> int:
        target = self.target
        if target is not None and get_ident() == self.thread and isinstance(text, str) and not self.paused:
            target.write(text)
            if not self.forward:
                return len(text)
        written: int = self.inner.write(text)
        return written

    def flush(self) -> None:
        self.inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Capture:
    """The hooks of one shell, installed and removed together."""

    def __init__(self, shell: Any, log: CellLog) -> None:
        self.shell = shell
        self.log = log
        self._infos: list[int] = []
        self._publish: Any = None
        self._write_format: Any = None
        self._tees: dict[str, _Tee] = {}
        self._paused: list[tuple[Any, str]] = []

    def install(self) -> None:
        """Register the events and wrap the display paths."""
        self.shell.events.register("pre_run_cell", self.pre)
        self.shell.events.register("post_run_cell", self.post)
        pub = getattr(self.shell, "display_pub", None)
        if pub is not None and self._publish is None:
            self._publish = pub.publish
            pub.publish = self._published
        hook = getattr(self.shell, "displayhook", None)
        if hook is not None and self._write_format is None and hasattr(hook, "write_format_data"):
            self._write_format = hook.write_format_data
            hook.write_format_data = self._formatted
        # What IPython itself prints around a result or an error (`Out[3]: `, the traceback in a
        # terminal) is not the cell's output: the result and the error are recorded as such.
        for owner, name in ((hook, "start_displayhook"), (hook, "finish_displayhook"), (self.shell, "showtraceback")):
            original = getattr(owner, name, None) if owner is not None else None
            if original is not None:
                self._paused.append((owner, name))
                setattr(owner, name, self._pausing(original, resume=name != "start_displayhook",
                                                    pause=name != "finish_displayhook"))  # fmt: skip

    def uninstall(self) -> None:
        """Undo `install`."""
        for name, fn in (("pre_run_cell", self.pre), ("post_run_cell", self.post)):
            try:
                self.shell.events.unregister(name, fn)
            except ValueError:
                pass
        if self._publish is not None:
            del self.shell.display_pub.publish  # the instance attribute: the class's method is back
            self._publish = None
        if self._write_format is not None:
            del self.shell.displayhook.write_format_data
            self._write_format = None
        for owner, name in self._paused:
            with contextlib.suppress(AttributeError):
                delattr(owner, name)
        self._paused.clear()
        self._untee()

    # --- events --------------------------------------------------------------------------------

    def pre(self, info: Any) -> None:
        """`pre_run_cell`: start a record and point the streams at it."""
        # IPython has already counted this cell when it announces it.
        count = self.shell.execution_count - 1 if getattr(info, "store_history", False) else None
        record = self.log.start(info.raw_cell or "", cell_id=_cell_id(info), execution_count=count)
        self._infos.append(id(info))
        self._target(record)

    def post(self, result: Any) -> None:
        """`post_run_cell`: finish the record and point the streams back at the outer cell, if any."""
        info = getattr(result, "info", None)
        if not self._infos or self._infos[-1] != id(info):
            return  # a cell whose `pre_run_cell` never came (it failed before running)
        self._infos.pop()
        error = getattr(result, "error_before_exec", None) or getattr(result, "error_in_exec", None)
        count = getattr(result, "execution_count", None)
        self.log.finish(count if getattr(info, "store_history", False) else None, error)
        self._target(self.log.running())

    def _target(self, record: CellRecord | None) -> None:
        streams = record._streams if record is not None else None
        for name in ("stdout", "stderr"):
            tee = self._tees.get(name)
            if streams is not None and (tee is None or getattr(sys, name) is not tee):
                # First cell, or someone replaced the stream since: wrap what is there now.
                tee = self._tees[name] = _Tee(getattr(sys, name))
                setattr(sys, name, tee)
            if tee is None:
                continue
            tee.paused = False  # a prompt that raised half-way must not keep recording paused
            if streams is None or record is None:
                tee.target = None
                continue
            tee.target = streams[name]
            tee.thread = record.thread
            tee.forward = record.kind != "agent"

    def _pausing(self, fn: Any, *, pause: bool, resume: bool) -> Any:
        """`fn` with the streams' recording paused before it (`pause`) and resumed after (`resume`)."""

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if pause:
                for tee in self._tees.values():
                    tee.paused = True
            try:
                return fn(*args, **kwargs)
            finally:
                if resume:
                    for tee in self._tees.values():
                        tee.paused = False

        return wrapped

    def _untee(self) -> None:
        for name, tee in self._tees.items():
            tee.target = None
            if getattr(sys, name) is tee:
                setattr(sys, name, tee.inner)
        self._tees.clear()

    # --- display paths -------------------------------------------------------------------------

    def _published(self, data: Any, metadata: Any = None, *args: Any, **kwargs: Any) -> Any:
        record = self.log.recording()
        if record is not None and isinstance(data, dict) and not kwargs.get("update"):
            self.log.add_output("display_data", data, metadata)
            if record.kind == "agent":
                return None
        return self._publish(data, metadata, *args, **kwargs)

    def _formatted(self, format_dict: Any, md_dict: Any = None) -> Any:
        record = self.log.recording()
        if record is not None and isinstance(format_dict, dict):
            self.log.add_output("execute_result", format_dict, md_dict)
            if record.kind == "agent":
                return None
        return self._write_format(format_dict, md_dict)


def _cell_id(info: Any) -> str | None:
    cell_id = getattr(info, "cell_id", None)
    return str(cell_id) if cell_id else None
