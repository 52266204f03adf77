"""The cell log: every cell this kernel runs, recorded as it runs, in true execution order.

`install(shell)` (done by `%load_ext flue_nb`) hooks IPython's `pre_run_cell`/`post_run_cell`
events. For each cell it keeps the frontend's cell id (JupyterLab/Notebook 7 send the notebook's
cell id, VS Code a `vscode-notebook-cell:` URI; nbclient and terminal IPython none), the execution
count, the source, start and duration, the outcome (the exception type, message and a traceback
without ANSI codes), stdout and stderr (teed while the cell runs, each bounded as it is written:
see `_bounded`), and the `execute_result`/`display_data` outputs (images by digest).

Bounds (the memory ceiling): at most `MAX_CELLS` cells, `MAX_OUTPUTS` outputs per cell, each
stream and each text output cut to 2000 lines / 50 KB (head and tail); across the log at most
`MAX_TEXT_CHARS` characters of recorded text, the oldest cells' outputs let go first (their
source and outcome stay), and at most `MAX_IMAGE_BYTES` of images, the oldest dropped first.

`%%flue` cells (and `%flue` lines) are recorded as kind `flue`, their output not teed (it is the
agent's transcript); cells the agent runs with `run_cell` are kind `agent`. The `python` tool's
calls never pass through IPython's `run_cell`, so they are not cells here at all.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from flue_nb.notebook.celllog import _capture
from flue_nb.notebook.celllog._bounded import BoundedText, cut_text

__all__ = ["MAX_CELLS", "CellError", "CellLog", "CellRecord", "cell_log", "install", "uninstall"]

MAX_CELLS = 500
"""Cells the log keeps; older ones are forgotten."""
MAX_OUTPUTS = 50
"""`display_data`/`execute_result` outputs kept per cell (later ones are counted, not kept)."""
MAX_TEXT_CHARS = 8_000_000
"""Characters of recorded streams and text outputs across the log (the oldest let go first)."""
MAX_IMAGE_BYTES = 16_000_000
"""Bytes of images kept for `cell` to show (base64 text as sent by the kernel)."""

CellKind = Literal["user", "flue", "agent"]
_FLUE_LINE = re.compile(r"^\s*%%?flue\b", re.M)
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_TEXT_MIMES = ("text/plain", "text/markdown", "text/html", "text/latex", "application/json")
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def strip_ansi(text: str) -> str:
    """`text` without terminal colour and cursor codes."""
    return _ANSI.sub("", text) if "\x1b" in text else text


@dataclass(frozen=True, slots=True)
class CellError:
    """What a cell raised."""

    type: str
    message: str
    traceback: str
    """Plain text, no ANSI codes, IPython's own frames left out."""


@dataclass(slots=True)
class CellRecord:
    """One run of one cell."""

    number: int
    """Position in this kernel's log (1, 2, ...), never reused."""
    kind: CellKind
    source: str
    cell_id: str | None
    execution_count: int | None
    started: float
    """`time.time()` when it started."""
    thread: int = field(default=0, repr=False)
    duration: float | None = None
    """Seconds; None while it runs."""
    outcome: Literal["running", "ok", "error"] = "running"
    error: CellError | None = None
    outputs: list[dict[str, Any]] = field(default_factory=list)
    """nbformat-like `execute_result`/`display_data` dicts; images as `{"digest": ...}`."""
    outputs_dropped: int = 0
    text_dropped: bool = False
    """True once the log let go of this cell's streams and outputs to stay within its bound."""
    provenance: dict[str, Any] | None = None
    """For `agent` cells: the tool call that ran it."""
    _streams: dict[str, BoundedText] | None = field(default=None, repr=False)
    _text: dict[str, str] = field(default_factory=dict, repr=False)

    def stream(self, name: str) -> str:
        """The recorded `stdout` or `stderr`, cut to the limits (while running: so far).

        The cut is made when first read, not when the cell ends: a cell's end stays cheap.
        """
        text = self._text.get(name)
        if text is not None:
            return text
        buffer = self._streams.get(name) if self._streams is not None else None
        text = buffer.value() if buffer is not None else ""
        if self.outcome != "running":
            self._text[name] = text
        return text

    @property
    def stdout(self) -> str:
        """What the cell printed to stdout (see `stream`)."""
        return self.stream("stdout")

    @property
    def stderr(self) -> str:
        """What the cell printed to stderr (see `stream`)."""
        return self.stream("stderr")


class CellLog:
    """The cells of this kernel, in execution order, bounded (see the module docstring)."""

    def __init__(self, *, max_cells: int = MAX_CELLS) -> None:
        self._records: deque[CellRecord] = deque(maxlen=max_cells)
        self._stack: list[CellRecord] = []
        self._lock = threading.Lock()
        self._numbers = 0
        self._text_chars = 0
        self.images: OrderedDict[str, tuple[str, str]] = OrderedDict()
        """digest → (mime type, base64 data) of recent images, oldest first."""
        self._image_bytes = 0
        self._next: tuple[CellKind, dict[str, Any] | None] | None = None
        self._capture: _capture.Capture | None = None
        self.last_agent: CellRecord | None = None
        """The cell `run_cell` ran most recently."""

    # --- recording ---------------------------------------------------------------------------

    def expect_agent_cell(self, provenance: dict[str, Any] | None) -> None:
        """The next cell to start is the agent's (`run_cell`), not the user's."""
        self._next = ("agent", provenance)

    def start(self, source: str, *, cell_id: str | None, execution_count: int | None) -> CellRecord:
        """Begin recording a cell (from `pre_run_cell`)."""
        kind: CellKind
        kind, provenance = self._next or ("user", None)
        self._next = None
        if kind == "user" and "flue" in source and _FLUE_LINE.search(source):
            kind = "flue"
        self._numbers += 1
        record = CellRecord(
            self._numbers, kind, source, cell_id, execution_count, time.time(),
            thread=threading.get_ident(), provenance=provenance,
        )  # fmt: skip
        if kind != "flue":
            record._streams = {"stdout": BoundedText(), "stderr": BoundedText()}
        # Held only for the append: a tool copying the log on another thread must not see the
        # deque change under it ("deque mutated during iteration").
        with self._lock:
            if len(self._records) == self._records.maxlen:
                self._forget(self._records[0])
            self._records.append(record)
        self._stack.append(record)
        if kind == "agent":
            self.last_agent = record
        return record

    def finish(self, execution_count: int | None, error: BaseException | None) -> CellRecord | None:
        """End the innermost running cell (from `post_run_cell`)."""
        if not self._stack:
            return None
        record = self._stack.pop()
        record.duration = time.time() - record.started
        if execution_count is not None:
            record.execution_count = execution_count
        if error is not None:
            record.outcome = "error"
            record.error = _describe_error(error)
        else:
            record.outcome = "ok"
        self._text_chars += _record_chars(record)
        if self._text_chars > MAX_TEXT_CHARS:
            with self._lock:
                self._trim()
        return record

    def running(self) -> CellRecord | None:
        """The innermost cell still running, if any."""
        return self._stack[-1] if self._stack else None

    def recording(self) -> CellRecord | None:
        """The cell whose output is being teed right now on this thread, if any."""
        if not self._stack:
            return None
        top = self._stack[-1]
        if top._streams is None or top.outcome != "running" or top.thread != threading.get_ident():
            return None
        return top

    def add_output(self, output_type: str, data: dict[str, Any], metadata: dict[str, Any] | None = None) -> None:
        """Record a `display_data`/`execute_result` bundle into the running cell."""
        record = self.recording()
        if record is None:
            return
        if len(record.outputs) >= MAX_OUTPUTS:
            record.outputs_dropped += 1
            return
        kept: dict[str, Any] = {}
        for mime, value in data.items():
            if mime in IMAGE_MIMES and isinstance(value, str):
                kept[mime] = {"digest": self._keep_image(mime, value)}
            elif mime in _TEXT_MIMES or mime.startswith("text/"):
                text = value if isinstance(value, str) else _json_text(value)
                kept[mime] = cut_text(strip_ansi(text))
            else:
                kept[mime] = {"omitted": f"{mime} output not kept"}
        output: dict[str, Any] = {"output_type": output_type, "data": kept}
        if metadata:
            output["metadata"] = {k: v for k, v in metadata.items() if isinstance(v, (str, int, float, bool))}
        record.outputs.append(output)

    def _keep_image(self, mime: str, b64: str) -> str:
        import hashlib

        digest = hashlib.sha256(b64.encode("ascii", "replace")).hexdigest()
        with self._lock:
            if digest in self.images:
                self.images.move_to_end(digest)
                return digest
            if len(b64) > MAX_IMAGE_BYTES:
                return digest  # too large to keep: its digest still says an image was shown
            self.images[digest] = (mime, b64)
            self._image_bytes += len(b64)
            while self._image_bytes > MAX_IMAGE_BYTES:
                _, (_, old) = self.images.popitem(last=False)
                self._image_bytes -= len(old)
        return digest

    def _forget(self, record: CellRecord) -> None:
        self._text_chars -= _record_chars(record)

    def _trim(self) -> None:
        """Let go of the oldest cells' streams and outputs until the log is within its bound."""
        for old in self._records:
            if self._text_chars <= MAX_TEXT_CHARS:
                return
            if old.text_dropped or old.outcome == "running":
                continue
            self._text_chars -= _record_chars(old)
            old._streams = None
            old._text = {"stdout": "", "stderr": ""}
            old.outputs = []
            old.text_dropped = True

    # --- reading -----------------------------------------------------------------------------

    def records(self) -> list[CellRecord]:
        """Every kept cell, in execution order (oldest first)."""
        with self._lock:
            return list(self._records)

    def __iter__(self) -> Iterator[CellRecord]:
        return iter(self.records())

    def __len__(self) -> int:
        return len(self._records)

    def clear(self) -> None:
        """Forget every finished cell."""
        with self._lock:
            running = [r for r in self._records if r.outcome == "running"]
            self._records.clear()
            self._records.extend(running)
            self._text_chars = 0
            self.images.clear()
            self._image_bytes = 0


def _describe_error(exc: BaseException) -> CellError:
    import traceback

    tb = exc.__traceback__
    # IPython's own frames (run_code and what calls it) come first: the user's start after them.
    while tb is not None and _is_ipython_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return CellError(type(exc).__name__, strip_ansi(str(exc)), cut_text(strip_ansi(text)))


def _is_ipython_frame(filename: str) -> bool:
    return "/IPython/" in filename or "\\IPython\\" in filename or "/flue_nb/notebook/celllog/" in filename


def _json_text(value: Any) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _output_chars(output: dict[str, Any]) -> int:
    return sum(len(v) for v in output.get("data", {}).values() if isinstance(v, str))


def _record_chars(record: CellRecord) -> int:
    if record.text_dropped:
        return 0
    held = 0
    if record._text:
        for text in record._text.values():
            held += len(text)
    elif record._streams is not None:  # not read yet: what its buffers hold (a head and a tail each)
        for buffer in record._streams.values():
            held += buffer.held
    for output in record.outputs:
        held += _output_chars(output)
    return held


_logs: dict[int, CellLog] = {}


def cell_log(shell: Any = None) -> CellLog | None:
    """The log installed in `shell` (default: the running IPython), or None."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return None
        shell = get_ipython()
        if shell is None:
            return None
    return _logs.get(id(shell))


def install(shell: Any) -> CellLog:
    """Start logging the cells `shell` runs (idempotent); returns its log."""
    log = _logs.get(id(shell))
    if log is None:
        log = _logs[id(shell)] = CellLog()
        log._capture = _capture.Capture(shell, log)
        log._capture.install()
    return log


def uninstall(shell: Any) -> None:
    """Stop logging `shell`'s cells and forget its log."""
    log = _logs.pop(id(shell), None)
    if log is not None and log._capture is not None:
        log._capture.uninstall()
