"""The kernel `python` tool: run code in the live namespace like a cell, and say what changed.

A call execs the code in the user's namespace, shows the value of a final expression (as a cell
would), captures stdout, stderr and tracebacks, and reports which user variables it created,
changed or deleted. Output is cut to its tail like `bash`; a result too large for that is kept in
the kernel behind a handle (`_flue.results[N]`, `_flue.values[N]`) that the model can slice with
another call instead of having it stuffed into context.

What the user's code raises is a result with `is_error=True`, never an exception out of the tool.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import dataclasses
import hashlib
import io
import itertools
import linecache
import os
import sys
import threading
import traceback
import types
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from flue_nb.notebook.document.runner import Runner
from flue_nb.notebook.kernel import drawing
from flue_nb.runtime.effect_capture import (
    ValueKeeper,
    keep_blobs,
    pickle_digest,
    record_files,
    scan,
    store_files,
    summarize,
    targets,
    workspace_changes,
)
from flue_nb.runtime.effects import EFFECTS_KEY, Bounds, Effects, VariableEffect
from flue_nb.runtime.facts import NamespaceDiff
from flue_nb.runtime.tools.runs_later import code_runs_later
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput
from flue_nb.runtime.tools.truncate import Truncation, truncate_tail

__all__ = [
    "FileWatch",
    "FlueResults",
    "Namespace",
    "NamespaceWatch",
    "OnChange",
    "Runner",
    "Workspace",
    "keep_in",
    "python_tool",
    "watch_files",
]

T = TypeVar("T")

"""Runs a zero-argument sync function (e.g. on the kernel's main thread); returns its result."""

Namespace = dict[str, Any] | Callable[[], dict[str, Any]]
"""A namespace, or a function returning it at each call (so it can be resolved lazily)."""

HANDLE_NAME = "_flue"
"""Namespace name of the `FlueResults` that holds large results (`_`: never reported as a change)."""
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# IPython puts these in `user_ns`; they are plumbing, not the user's variables.
_IPYTHON_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit"})
# Identity says all there is to say about these: immutable, or code whose identity is the point.
_NO_FINGERPRINT = (
    int, float, complex, str, bytes, bool, type(None), tuple, frozenset, range,
    type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
)  # fmt: skip
_CONTAINERS = (list, dict, set, bytearray, deque)
# Element identities are compared only for containers this small, so a snapshot stays cheap.
_SHALLOW_LIMIT = 1000
_MAX_NAMES = 20
_PREVIEW_CHARS = 2000
_cell_numbers = itertools.count(1)

_DESCRIPTION = """\
Run Python code in the user's live Jupyter kernel, in the same namespace as their notebook: the \
variables you see are theirs, and what you define stays for them. It runs like a notebook cell: \
the value of a final expression is shown (end the code with `;` to hide it). Output (stdout, \
stderr, tracebacks, the value) is cut to its last 2000 lines / 50 KB; a larger result is kept in \
the kernel as `_flue.results[N]` (full text) and `_flue.values[N]` (the value) for you to slice \
with another call. Each result lists the variables the code created, changed or deleted. \
Figures the code draws (matplotlib, with or without `plt.show()`), images it `display`s and an \
image-valued result come back as images you can look at (at most 4 per call). Code \
runs on the kernel's main thread with no timeout, so keep calls short; top-level `await` is not \
supported."""


class PythonInput(BaseModel):
    """Input of the `python` tool."""

    model_config = ConfigDict(extra="forbid")
    code: str = Field(description="Python source to run in the kernel's namespace, like a notebook cell.")


class FlueResults:
    """Large `python` results kept in the kernel: `results[N]` full text, `values[N]` the value."""

    def __init__(self) -> None:
        self.results: dict[int, str] = {}
        """Full output text of each kept result, by handle number."""
        self.values: dict[int, Any] = {}
        """The final expression's value of each kept result that had one."""
        self._next = 1

    def keep(self, text: str, value: Any = None, *, has_value: bool = False) -> int:
        """Store a result's full text (and its value when `has_value`); return its handle number."""
        number = self._next
        self._next += 1
        self.results[number] = text
        if has_value:
            self.values[number] = value
        return number

    def clear(self) -> None:
        """Forget every kept result, freeing the memory their values hold."""
        self.results.clear()
        self.values.clear()

    def __repr__(self) -> str:
        kept = ", ".join(str(n) for n in self.results) or "none"
        return f"<flue kept results: {kept}; see .results[N] / .values[N], free with .clear()>"


@dataclass(slots=True)
class _Changes:
    created: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


async def _run_inline(fn: Callable[[], T]) -> T:
    # Inline on the caller's thread, not a worker: user code (and the objects in the namespace,
    # e.g. GUI handles, sqlite connections) may not be thread-safe.
    return fn()


Workspace = str | Callable[[], str | None] | None
"""The directory whose files a call's effect record covers (a bounded scan before and after the
call, as for `bash`), or a function returning it; None records no file effects."""

OnChange = Callable[[str, NamespaceDiff, ToolContext], Awaitable[str | None]]
"""Called after a call that ran without error and changed names: (code, diff, context); the text
it returns, if any, is added to the result (`python_tool="cells"` writes the code as a cell)."""


def python_tool(
    namespace: Namespace,
    *,
    runner: Runner | None = None,
    bounds: Bounds | None = None,
    record_effects: bool = True,
    on_change: OnChange | None = None,
    workspace: Workspace = None,
) -> Tool:
    """The `python` tool, running code in `namespace` through `runner` (default: inline).

    Args:
        namespace: The dict to run code in, or a function returning it (called at each call).
        runner: Runs the zero-argument cell function where the namespace lives; the notebook
            layer passes one that hops to the kernel's main thread.
        bounds: What a call's effect record may keep (old values of the names it changes).
        record_effects: False records no effects at all (what the recording costs is measured
            against it: bench/effects_cost.py).
        on_change: See `OnChange`.
        workspace: See `Workspace`: the files the code creates, changes or deletes there are
            recorded (digests before and after, old contents kept) and can be undone.
    """
    run_on = runner or _run_inline
    limits = bounds or Bounds()

    async def run(args: PythonInput, ctx: ToolContext) -> ToolOutput:
        ns = namespace() if callable(namespace) else namespace
        # Old values go to the store's blobs only for a run with a store (a session's).
        keep = limits if ctx.store is not None else None
        files = await watch_files(workspace if record_effects else None, ctx, limits)
        result, blobs = await run_on(lambda: _run_cell(args.code, ns, ctx.submission_id, keep, record_effects))
        if blobs:
            keep_blobs(ctx.store, ctx.conversation_id, blobs, limits)
        result = await files.record(result)
        diff = result.namespace
        if (
            on_change is not None
            and not result.is_error
            and diff is not None
            and (diff.added or diff.changed or diff.removed)
        ):
            note = await on_change(args.code, diff, ctx)
            if note:
                result = dataclasses.replace(result, content=f"{result.content}\n{note}")
        return result

    return Tool("python", _DESCRIPTION, PythonInput, run, summary_arg="code", runs_later=code_runs_later)


class FileWatch:
    """A workspace scanned before a call: `record` scans it again after and adds the call's file
    effects to its result."""

    def __init__(self, before: Any = None, ctx: ToolContext | None = None, bounds: Bounds | None = None) -> None:
        self.before = before
        self.ctx = ctx
        self.bounds = bounds or Bounds()

    async def record(self, result: ToolOutput) -> ToolOutput:
        """`result` with the files changed since the first scan in its effect record."""
        if self.before is None or self.ctx is None:
            return result
        changes, cut = await asyncio.to_thread(
            workspace_changes, self.before, self.bounds, can_keep=self.ctx.store is not None
        )
        details = record_files(result.details, changes, self.ctx, self.bounds, scan_cut=cut)
        return result if details is result.details else dataclasses.replace(result, details=details)


async def watch_files(workspace: Workspace, ctx: ToolContext, bounds: Bounds) -> FileWatch:
    """Scan `workspace` before a call (the bounded scan `bash` makes; the store's own files left
    out); nothing when there is none."""
    root = workspace() if callable(workspace) else workspace
    if not root or not os.path.isdir(root):
        return FileWatch()
    seen = await asyncio.to_thread(scan, root, bounds, read=ctx.store is not None, skip=store_files(ctx.store))
    return FileWatch(seen, ctx, bounds)


class NamespaceWatch:
    """The namespace before code runs (a snapshot, and the old values of the names the code may
    change, within `keep`), then after it: what changed, as a diff and as an effect record."""

    def __init__(self, code: str, ns: dict[str, Any], keep: Bounds | None, record: bool = True) -> None:
        self.keep = keep
        self.record = record
        self.before = _snapshot(ns)
        self.keeper = ValueKeeper(keep or Bounds())
        if keep is not None and record:
            names, self.keeper.inplace = targets(code)
            self.keeper.capture(ns, (n for n in names if _is_user_name(n)))
        self.changes = _Changes()
        self.after: dict[str, tuple[Any, Any]] = {}

    def finish(self, ns: dict[str, Any]) -> tuple[Effects, dict[str, bytes]]:
        """Compare with `ns` now: the effect record and the framed blobs of the old values kept."""
        self.after = _snapshot(ns)
        self.changes = _diff(self.before, self.after, self.keeper)
        if not self.record:
            return Effects(), {}
        return _effects(self.changes, self.before, self.after, self.keeper, self.keep)

    def diff(self) -> NamespaceDiff:
        """The names created, changed and deleted (after `finish`)."""
        c = self.changes
        return NamespaceDiff(tuple(c.created), tuple(c.changed), tuple(c.deleted))

    def line(self) -> str:
        """`Variables: created `x` (int); changed `df` (DataFrame, shape (2, 3))`, or ""."""
        return _variables_line(self.changes, self.after)


def _run_cell(
    code: str, ns: dict[str, Any], submission_id: str | None = None, keep: Bounds | None = None, record: bool = True
) -> tuple[ToolOutput, dict[str, bytes]]:
    """Run `code` in `ns` like a notebook cell and describe what happened, as a tool result, with
    its effect record in `details["effects"]` and the blobs of the old values it keeps (`keep`:
    the bounds; None keeps none)."""
    watch = NamespaceWatch(code, ns, keep, record)
    filename = f"<python-input-{next(_cell_numbers)}>"
    buffer = io.StringIO()
    error: str | None = None
    has_value, value, value_repr = False, None, None
    # Figures the code draws (shown or left open), `display`ed images and an image-valued
    # result become the result's images (issue 14.1).
    with _captured(buffer), drawing.capture() as drawn:
        try:
            body, last = _compile(code, filename)
        except (SyntaxError, ValueError) as exc:
            error = "syntax"
            trace = "".join(traceback.format_exception_only(type(exc), exc))
            trace += "The code did not run: fix it and call `python` again.\n"
        else:
            # Registered so tracebacks, `inspect.getsource` and IPython can show these lines.
            linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
            trace = ""
            try:
                exec(body, ns)  # noqa: S102 - running the model's code is the point
                if last is not None:
                    value = eval(last, ns)
                    has_value = value is not None and not code.rstrip().endswith(";")
            except BaseException as exc:  # noqa: BLE001 - the user's failure is data
                if isinstance(exc, KeyboardInterrupt) and _is_main_thread():
                    raise  # Ctrl-C / the stop button: the cell's interrupt, not the code's result
                # SystemExit, GeneratorExit, and KeyboardInterrupt off the main thread (where no
                # signal can deliver one: the code raised it itself) are the code's own failures.
                error = "exception"
                trace = _user_traceback(exc)
            if has_value:
                value_repr = _safe_repr(value)
                drawn.add_value(value)
    effects, blobs = watch.finish(ns)

    body_text = _join(buffer.getvalue(), trace)
    if value_repr is not None:
        out = f"Out: {value_repr}" if "\n" not in value_repr else f"Out:\n{value_repr}"
        body_text = _join(body_text, out)
    cut = truncate_tail(body_text)
    diff = watch.diff()
    details: dict[str, Any] = {
        "truncated": cut.truncated,
        "handle": None,
        "error": error,
        "value_type": type(value).__name__ if has_value else None,
    }
    if effects:
        details[EFFECTS_KEY] = effects.to_dict()
    parts = [cut.text.rstrip("\n")] if cut.text.strip() else []
    if cut.truncated:
        number = _holder(ns).keep(body_text, value, has_value=has_value)
        details["handle"] = number
        shown_value = _describe(value) if has_value else None
        parts.append(_handle_note(number, body_text, cut, shown_value))
        if not cut.shown_lines:
            # The last line alone is over the cut (a long repr): its head is the useful preview.
            last_line = body_text.rstrip("\n").rsplit("\n", 1)[-1]
            parts.append(
                f"Preview (first {_PREVIEW_CHARS:,} characters of the last line):\n{last_line[:_PREVIEW_CHARS]}…"
            )
    line = watch.line()
    if line:
        parts.append(line)
    if drawn.images or drawn.notes:
        parts.append(drawn.summary())
        details["images"] = [
            {"label": p.label, "width": p.width, "height": p.height, "digest": p.digest} for p in drawn.images
        ]
    drawing.show(drawn, submission_id)  # the person's cell shows what the model is sent
    content = "\n\n".join(parts) if parts else "(no output)"
    result = ToolOutput(content, is_error=error is not None, details=details, images=drawn.images, namespace=diff)
    return result, blobs


def _effects(
    changes: _Changes,
    before: dict[str, tuple[Any, Any]],
    after: dict[str, tuple[Any, Any]],
    keeper: ValueKeeper,
    keep: Bounds | None,
) -> tuple[Effects, dict[str, bytes]]:
    """The call's variable effects, and the framed blobs of the old values kept."""
    bounds = keep or Bounds()
    records: list[VariableEffect] = []
    blobs: dict[str, bytes] = {}
    sizes: dict[str, int] = {}
    every = [(n, "created") for n in changes.created] + [(n, "changed") for n in changes.changed]
    every += [(n, "deleted") for n in changes.deleted]
    omitted = [n for n, _ in every[bounds.items :]]
    for name, action in every[: bounds.items]:
        old = before[name][0] if name in before else None
        framed = keeper.blobs.get(name)
        before_summary = (keeper.summaries.get(name) or summarize(old, bounds)) if action != "created" else None
        after_summary = summarize(after[name][0], bounds) if action != "deleted" else None
        kept = not_kept = None
        if action != "created":
            if framed is not None:
                kept = hashlib.sha256(framed).hexdigest()  # the blob's digest, as `frame_blob` names it
                blobs[kept] = framed
                sizes[kept] = len(framed)
            elif keep is None:
                not_kept = "not kept: this run has no store"
            else:
                not_kept = keeper.refused.get(name) or (
                    "not captured: changed by code that does not name it as a target (a function, an alias)"
                )
                if name in keeper.refused and before[name][0] is after[name][0] and before[name][1] == after[name][1]:
                    not_kept += "; recorded as changed because the code assigns into it (not compared)"
        records.append(VariableEffect(name, action, before_summary, after_summary, kept, not_kept))  # type: ignore[arg-type]
    effects = Effects(variables=tuple(records), omitted=tuple(omitted), bounds=bounds.to_dict(), kept_bytes=sizes)
    return (effects if records or omitted else Effects()), blobs


class _Routed:
    """`sys.stdout`/`sys.stderr` once the tool has run: writes from a thread running tool code go
    to that call's buffer, everyone else's to the stream this replaced. (`redirect_stdout` is
    process-wide: a background call would swallow the kernel's own output, `%flue abort`'s too.)"""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        target = getattr(_capture, "buffer", None)
        written: int = (target if target is not None else self.inner).write(text)
        return written

    def flush(self) -> None:
        if getattr(_capture, "buffer", None) is None:
            self.inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


_capture = threading.local()


@contextlib.contextmanager
def _captured(buffer: io.StringIO) -> Iterator[None]:
    """Send this thread's stdout and stderr to `buffer` while the block runs."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _Routed):
            setattr(sys, name, _Routed(stream))
    previous = getattr(_capture, "buffer", None)
    _capture.buffer = buffer
    try:
        yield
    finally:
        _capture.buffer = previous


def _is_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _compile(code: str, filename: str) -> tuple[types.CodeType, types.CodeType | None]:
    """Compile all statements, splitting off a final expression so its value can be shown."""
    tree = ast.parse(code, filename=filename, mode="exec")
    last = None
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr):
        tree.body.pop()
        last = ast.Expression(final.value)
    # dont_inherit: this module's `from __future__ import annotations` must not leak into user code.
    body = compile(tree, filename, "exec", dont_inherit=True)
    return body, (compile(last, filename, "eval", dont_inherit=True) if last is not None else None)


def _user_traceback(exc: BaseException) -> str:
    """The traceback without its leading flue_nb frames, so the model sees the user's lines."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ must not lose the result
        return f"<{type(value).__name__} object; repr failed: {type(exc).__name__}: {exc}>"


def _join(a: str, b: str) -> str:
    if not a or not b:
        return a or b
    return a + ("" if a.endswith("\n") else "\n") + b


def _holder(ns: dict[str, Any]) -> FlueResults:
    holder = ns.get(HANDLE_NAME)
    if not isinstance(holder, FlueResults):
        holder = ns[HANDLE_NAME] = FlueResults()
    return holder


def keep_in(ns: dict[str, Any], text: str) -> int:
    """Keep `text` in the namespace's `_flue.results`; return its handle number."""
    return _holder(ns).keep(text)


def _handle_note(number: int, text: str, cut: Truncation, value_kind: str | None) -> str:
    # surrogatepass: output may hold lone surrogates; count them rather than fail.
    size = len(text.encode("utf-8", "surrogatepass"))
    lines = f"{cut.total_lines:,} line{'s' if cut.total_lines != 1 else ''}"
    if cut.shown_lines:
        shown = f"showing lines {cut.first_line:,}-{cut.total_lines:,}"
    else:
        shown = "its last line alone is over the cut, so only a preview is shown"
    note = (
        f"[Output too large ({size:,} bytes, {lines}): {shown}. The full text is kept in the "
        f"kernel as `{HANDLE_NAME}.results[{number}]` (str)"
    )
    if value_kind is not None:
        note += f" and the value as `{HANDLE_NAME}.values[{number}]` ({value_kind})"
    example = f"`print({HANDLE_NAME}.results[{number}][:2000])`"
    return f"{note}. Slice it with another `python` call, e.g. {example}.]"


# --- namespace snapshots ---------------------------------------------------------------------


def _is_user_name(name: str) -> bool:
    return not name.startswith("_") and name not in _IPYTHON_NAMES


def _snapshot(ns: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    # Holds the old objects (not just ids) until the diff: a freed object's id can be reused by
    # its replacement, which would hide a rebinding.
    return {name: (value, _fingerprint(value)) for name, value in list(ns.items()) if _is_user_name(name)}


def _fingerprint(value: Any) -> Any:
    """A cheap summary that changes when common containers change in place; never reads data.

    Immutable values need none (identity says it all, so nothing is hashed). `len` is taken only
    of built-in containers: on other objects it can be costly (a Django QuerySet runs its query).
    """
    if isinstance(value, _NO_FINGERPRINT):
        return None
    try:
        if isinstance(value, _CONTAINERS):
            if len(value) > _SHALLOW_LIMIT:
                return len(value)
            if isinstance(value, dict):
                return len(value), tuple(map(id, value.keys())), tuple(map(id, value.values()))
            if isinstance(value, set):
                return len(value), frozenset(map(id, value))
            if isinstance(value, bytearray):
                return bytes(value)
            return len(value), tuple(map(id, value))
        return _shape(value)
    except Exception:  # noqa: BLE001 - a fingerprint is best-effort; identity still counts
        return None


def _shape(value: Any) -> tuple[int, ...] | None:
    """`value.shape` when it is a tuple of ints (arrays, DataFrames), else None."""
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and all(isinstance(d, int) for d in shape):
        return shape
    return None


def _diff(
    before: dict[str, tuple[Any, Any]], after: dict[str, tuple[Any, Any]], keeper: ValueKeeper | None = None
) -> _Changes:
    changes = _Changes()
    for name in sorted(after.keys() | before.keys()):
        if name not in before:
            changes.created.append(name)
        elif name not in after:
            changes.deleted.append(name)
        elif after[name][0] is not before[name][0] or after[name][1] != before[name][1]:
            changes.changed.append(name)
        elif keeper is not None and (old := keeper.pickled(name)) is not None:
            # Changed in place where the fingerprint cannot see it (`df.loc[0, "a"] = 5`): the
            # old value was pickled, so the pickles tell (the new one hashed as it is made).
            if pickle_digest(after[name][0]) != hashlib.sha256(old).hexdigest():
                changes.changed.append(name)
        elif keeper is not None and name in keeper.refused and name in keeper.inplace:
            # The code assigns into it (`df["a"] *= 2`) but its old value was too big (or not
            # picklable) to keep and compare: recorded as changed, the reason with it. (A name
            # only bound again, as `import csv` binds `csv`, is the same object: unchanged.)
            changes.changed.append(name)
    return changes


def _describe(value: Any) -> str:
    """Type name plus shape or length: `DataFrame, shape (3, 2)`, `list, len 4`."""
    kind = type(value).__name__
    if isinstance(value, (str, bytes, tuple, frozenset, *_CONTAINERS)):
        return f"{kind}, len {len(value)}"
    if isinstance(value, _NO_FINGERPRINT):
        return kind
    try:
        shape = _shape(value)
    except Exception:  # noqa: BLE001 - describing is best-effort
        shape = None
    return f"{kind}, shape {shape}" if shape is not None else kind


def _variables_line(changes: _Changes, after: dict[str, tuple[Any, Any]]) -> str:
    def names(items: list[str], described: bool) -> str:
        shown = [f"`{n}` ({_describe(after[n][0])})" if described else f"`{n}`" for n in items[:_MAX_NAMES]]
        if len(items) > _MAX_NAMES:
            shown.append(f"and {len(items) - _MAX_NAMES} more")
        return ", ".join(shown)

    parts = []
    if changes.created:
        parts.append("created " + names(changes.created, True))
    if changes.changed:
        parts.append("changed " + names(changes.changed, True))
    if changes.deleted:
        parts.append("deleted " + names(changes.deleted, False))
    return "Variables: " + "; ".join(parts) if parts else ""
