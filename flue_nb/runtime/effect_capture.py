"""Taking the facts an `Effects` record holds: value summaries and old values (`ValueKeeper`),
files' digests and old contents, a bounded scan of a workspace (`scan`), and the per-conversation
cap on what is kept (`keep_blobs`).

Old values are kept by pickling (protocol 5, in-band) only the names a call may change, never
the namespace: `assigned_names(code)` reads them from the code (names it binds or deletes, the
roots of subscript and attribute targets, receivers of common in-place methods and of calls with
`inplace=True`). What it misses: a value changed through a function (`clean(df)`), through an
alias, or by code the text does not show (`exec`); such a change is still recorded (the diff
sees it) with `not_kept` saying its old value was not captured.
"""

from __future__ import annotations

import ast
import hashlib
import io
import os
import pickle
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flue_nb.runtime.effects import (
    BLOB_MAGIC,
    EFFECTS_KEY,
    Bounds,
    Effects,
    FileAction,
    FileEffect,
    ValueSummary,
    frame_blob,
)

__all__ = [
    "FileState",
    "Scan",
    "ValueKeeper",
    "assigned_names",
    "file_effect",
    "file_state",
    "inplace_names",
    "local_root",
    "pickle_digest",
    "record_files",
    "scan_changes",
    "keep_blobs",
    "scan",
    "store_files",
    "summarize",
    "targets",
    "workspace_changes",
]

_INPLACE_METHODS = frozenset(
    {
        "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem",
        "sort", "reverse", "add", "discard", "difference_update", "intersection_update",
        "symmetric_difference_update", "fill", "resize", "put", "itemset", "setflags", "sort_values",
        "sort_index", "drop", "dropna", "fillna", "rename", "set_index", "reset_index", "replace",
        "mask", "where", "clip", "interpolate", "drop_duplicates", "set_axis", "astype", "__setitem__",
    }
)  # fmt: skip
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".ipynb_checkpoints", "node_modules", ".venv", ".tox"})


def assigned_names(code: str) -> set[str]:
    """Top-level names `code` may bind, delete or change in place (see the module's note)."""
    return _targets(code)[0]


def inplace_names(code: str) -> set[str]:
    """The names `code` may change in place, keeping the object (`df["a"] = ...`, `x.attr = 1`,
    `rows.append(...)`, `arr += 1`): a change neither identity nor shape may show."""
    return _targets(code)[1]


def targets(code: str) -> tuple[set[str], set[str]]:
    """`assigned_names(code)` and `inplace_names(code)`, from one parse."""
    return _targets(code)


def _targets(code: str) -> tuple[set[str], set[str]]:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set(), set()
    names: set[str] = set()
    inplace: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root(node)
            if root:
                names.add(root)
                inplace.add(root)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            inplace.add(node.target.id)  # `arr += 1` on an array or a list keeps the object
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Global):
            names.update(node.names)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            inplace_kw = any(
                k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value for k in node.keywords
            )
            if inplace_kw or node.func.attr in _INPLACE_METHODS:
                root = _root(node.func.value)
                if root:
                    names.add(root)
                    inplace.add(root)
    return names, inplace


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _estimate(value: Any) -> int | None:
    """A cheap size estimate (bytes) where one exists: arrays, frames, bytes, str."""
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    shape = getattr(value, "shape", None)
    if hasattr(value, "columns") and isinstance(shape, tuple) and all(isinstance(d, int) for d in shape):
        # A frame: 8 bytes a cell (pandas' own memory_usage costs milliseconds); text columns
        # are bigger, which the pickled size then catches.
        size = 8
        for d in shape:
            size *= d
        return size
    return None


def _shape_len(value: Any) -> tuple[tuple[int, ...] | None, int | None]:
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and all(isinstance(d, int) for d in shape):
        return shape, None
    if isinstance(value, (str, bytes, bytearray, list, tuple, dict, set, frozenset, deque)):
        return None, len(value)
    return None, None


def _pickled(value: Any, limit: int, *, prefix: bytes = b"") -> tuple[bytes | None, str | None]:
    """`prefix` and the pickled value (protocol 5) in one buffer, the pickle within `limit`
    bytes, or None and why not. Pickled straight into the buffer that is returned: a kept value
    costs one copy of its pickle, not two (`prefix + pickle.dumps(value)` made a second)."""
    estimate = _estimate(value)
    if estimate is not None and estimate > limit:
        return None, f"over the {_size(limit)} cap ({_size(estimate)})"
    if isinstance(value, (list, dict, set, tuple, deque)) and len(value) > limit // 8:
        return None, f"over the {_size(limit)} cap ({len(value):,} items)"
    buf = io.BytesIO()
    buf.write(prefix)
    try:
        pickle.Pickler(buf, protocol=5).dump(value)
    except Exception as exc:  # noqa: BLE001 - an open file, a socket, a lambda: listed, not kept
        return None, f"cannot be pickled ({type(exc).__name__}: {str(exc)[:80]})"
    size = buf.tell() - len(prefix)
    if size > limit:
        return None, f"over the {_size(limit)} cap ({_size(size)} pickled)"
    return buf.getvalue(), None


class _Sha256Writer:
    """A file that only hashes what is written to it (a pickle compared, never held)."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()

    def write(self, data: Any) -> int:
        self.hash.update(data)
        return len(data)


def pickle_digest(value: Any) -> str | None:
    """sha256 of the value's pickle (protocol 5), streamed: the pickle is never held whole;
    None when it cannot be pickled."""
    out = _Sha256Writer()
    try:
        pickle.Pickler(out, protocol=5).dump(value)
    except Exception:  # noqa: BLE001 - no digest for what cannot be pickled
        return None
    return out.hash.hexdigest()


def summarize(value: Any, bounds: Bounds, pickled: bytes | memoryview | None = None) -> ValueSummary:
    """Type, shape or length, and a digest when the value pickles within `bounds.digest_bytes`."""
    shape, length = _shape_len(value)
    if pickled is None:
        pickled, _ = _pickled(value, bounds.digest_bytes)
    digest = hashlib.sha256(pickled).hexdigest() if pickled is not None else None
    return ValueSummary(type(value).__name__, shape, length, digest)


@dataclass(slots=True)
class ValueKeeper:
    """The old values of one call's candidate names, within a step's bounds."""

    bounds: Bounds
    blobs: dict[str, bytes] = field(default_factory=dict)
    """Each kept name's old value as the effect blob it is stored as (`frame_blob`'s bytes:
    `BLOB_MAGIC` and the pickle, made in one buffer)."""
    summaries: dict[str, ValueSummary] = field(default_factory=dict)
    """Each captured name's value as it was (an in-place change alters the object itself)."""
    refused: dict[str, str] = field(default_factory=dict)
    inplace: set[str] = field(default_factory=set)
    """The names the code may change in place (`inplace_names`)."""
    used: int = 0

    def pickled(self, name: str) -> memoryview | None:
        """The kept pickle of `name` (a view into its blob, not a copy)."""
        blob = self.blobs.get(name)
        return memoryview(blob)[len(BLOB_MAGIC) :] if blob is not None else None

    def capture(self, ns: Mapping[str, Any], names: Iterable[str]) -> None:
        """Pickle the current values of `names` that exist in `ns`, within the step's cap."""
        for name in sorted(names):
            if name not in ns:
                continue
            room = min(self.bounds.value_bytes, self.bounds.step_bytes - self.used)
            if room <= 0:
                self.refused[name] = f"over the step's {_size(self.bounds.step_bytes)} cap"
                continue
            data, why = _pickled(ns[name], room, prefix=BLOB_MAGIC)
            self.summaries[name] = summarize(
                ns[name], self.bounds, memoryview(data)[len(BLOB_MAGIC) :] if data else None
            )
            if data is None:
                self.refused[name] = why or "not kept"
                continue
            self.blobs[name] = data
            self.used += len(data) - len(BLOB_MAGIC)


@dataclass(frozen=True, slots=True)
class FileState:
    """A file as an effect record sees it: present or not, size, digest, content when read."""

    exists: bool
    size: int | None = None
    digest: str | None = None
    content: bytes | None = None
    why: str | None = None
    """Why the content was not read (too big, unreadable)."""


def file_state(path: str, bounds: Bounds, *, keep: bool = True) -> FileState:
    """The file at `path` now: digest and (with `keep`, within `bounds.value_bytes`) its content."""
    try:
        st = os.stat(path)
    except OSError:
        return FileState(False)
    if not os.path.isfile(path):
        return FileState(True, st.st_size, why="not a regular file")
    limit = bounds.value_bytes if keep else bounds.digest_bytes
    if st.st_size > max(limit, bounds.digest_bytes):
        return FileState(True, st.st_size, why=f"over the {_size(limit)} cap ({_size(st.st_size)})")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return FileState(True, st.st_size, why=f"unreadable ({exc.strerror})")
    digest = hashlib.sha256(data).hexdigest()
    if not keep or len(data) > bounds.value_bytes:
        return FileState(True, len(data), digest, why=None if not keep else f"over the {_size(limit)} cap")
    return FileState(True, len(data), digest, data)


@dataclass(slots=True)
class Scan:
    """A bounded look at a workspace: each file's size and mtime, and small files' contents."""

    root: str
    stats: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Absolute path -> (size, mtime_ns)."""
    contents: dict[str, bytes] = field(default_factory=dict)
    cut: str | None = None
    skip: frozenset[str] = frozenset()
    """Absolute paths left out (`store_files`); the scan after a call leaves out the same."""


def store_files(store: Any) -> frozenset[str]:
    """The files a SQLite store writes (the database, its WAL, shared memory and journal): a
    scan leaves them out, since the run itself writes them while a command or code runs, and
    undoing that would take the conversation's own records back."""
    path = getattr(store, "path", None)
    if not isinstance(path, str) or not path or path == ":memory:":
        return frozenset()
    base = os.path.abspath(path)
    return frozenset({base, base + "-wal", base + "-shm", base + "-journal"})


def scan(root: str, bounds: Bounds, *, read: bool, skip: frozenset[str] = frozenset()) -> Scan:
    """Walk `root` (skipping VCS, cache and venv directories, and the files in `skip`) within
    the file and time bounds; with `read`, keep the content of small files
    (`bounds.scan_keep_bytes`, at most `bounds.scan_keep_total` in all)."""
    out = Scan(root, skip=skip)
    deadline = time.monotonic() + bounds.scan_seconds
    read_total = 0
    stack = [root]
    with _read_lock:
        known = _read_ahead.get(root, {})
    kept: dict[str, tuple[int, int, int, int, bytes]] = {}
    now_ns = time.time_ns()
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            if len(out.stats) >= bounds.scan_files:
                out.cut = f"cut at {bounds.scan_files:,} files"
                return out
            if time.monotonic() > deadline:
                out.cut = f"cut after {bounds.scan_seconds:g} s"
                return out
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in _SKIP_DIRS:
                        stack.append(entry.path)
                    continue
                if not entry.is_file(follow_symlinks=False) or entry.path in skip:
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            out.stats[entry.path] = (st.st_size, st.st_mtime_ns)
            if read and st.st_size <= bounds.scan_keep_bytes and read_total + st.st_size <= bounds.scan_keep_total:
                found = _read(entry.path, st, known.get(entry.path), now_ns)
                if found is not None:
                    out.contents[entry.path] = found[4]
                    read_total += st.st_size
                    kept[entry.path] = found
    if read:
        with _read_lock:
            _read_ahead.pop(root, None)
            _read_ahead[root] = kept
            while len(_read_ahead) > _READ_AHEAD_ROOTS:
                _read_ahead.pop(next(iter(_read_ahead)))
    return out


# What the last reading scan of each root read (path -> size, mtime, inode, when read, content):
# the next scan reads again only the files whose stat changed, so a `python` call in a workspace
# of a thousand small files stats them instead of reading them all (bench/effects_cost.py). At
# most `scan_keep_total` bytes a root, for the last few roots.
_read_ahead: dict[str, dict[str, tuple[int, int, int, int, bytes]]] = {}
_read_lock = threading.Lock()
_READ_AHEAD_ROOTS = 4
_RACY_NS = 2_000_000_000
"""A file written this close before it was read may have been written again within the same
mtime tick, unseen (git's "racily clean" entries): its content is read again, not reused."""


def _read(
    path: str, st: os.stat_result, known: tuple[int, int, int, int, bytes] | None, now_ns: int
) -> tuple[int, int, int, int, bytes] | None:
    """The file's content (and what to remember of it): the one read before when its stat is
    the same and it was not written just before that reading, else read now."""
    if (
        known is not None
        and known[:3] == (st.st_size, st.st_mtime_ns, st.st_ino)
        and st.st_mtime_ns < known[3] - _RACY_NS
    ):
        return known
    try:
        with open(path, "rb") as f:
            return st.st_size, st.st_mtime_ns, st.st_ino, now_ns, f.read()
    except OSError:
        return None


# --- the conversation's cap on kept blobs ----------------------------------------------------

_ledgers: dict[tuple[int, str], deque[tuple[str, int]]] = {}
_ledger_lock = threading.Lock()


def _ledger(store: Any, conversation_id: str) -> deque[tuple[str, int]]:
    """The conversation's kept blobs, oldest first (read from its records once per process)."""
    key = (id(store), conversation_id)
    ledger = _ledgers.get(key)
    if ledger is None:
        ledger = deque()
        for r in store.records(conversation_id, kinds=["message"]):
            found = Effects.from_details(r.data.get("details")) if r.data.get("kind") == "tool_result" else None
            if found is not None:
                ledger.extend((digest, found.kept_bytes.get(digest, 0)) for digest in found.blobs())
        _ledgers[key] = ledger
    return ledger


def keep_blobs(store: Any, conversation_id: str | None, blobs: Mapping[str, bytes], bounds: Bounds) -> list[str]:
    """Put `blobs` (digest -> framed bytes) in the store, then drop the conversation's oldest kept
    blobs beyond `bounds.conversation_bytes`; the digests dropped (a record naming one then has
    no old value: an undo says so)."""
    for digest, data in blobs.items():
        store.put_blob(digest, data)
    if conversation_id is None:
        return []
    dropped: list[str] = []
    with _ledger_lock:
        ledger = _ledger(store, conversation_id)
        ledger.extend((d, len(b)) for d, b in blobs.items())
        total = sum(size for _, size in ledger)
        while ledger and total > bounds.conversation_bytes:
            digest, size = ledger.popleft()
            total -= size
            if all(d != digest for d, _ in ledger):  # a later record may keep the same bytes
                drop = getattr(store, "drop_blob", None)
                if drop is not None:
                    drop(digest)
                dropped.append(digest)
    return dropped


def blob_of(payload: bytes) -> tuple[str, bytes]:
    """Digest and framed bytes of an effect blob (see `effects.frame_blob`)."""
    return frame_blob(payload)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.0f} {unit}"
    return f"{n:,} bytes"


# --- files -----------------------------------------------------------------------------------


def local_root(sandbox: Any) -> str | None:
    """The host directory a sandbox's paths resolve in, when its files are this machine's."""
    from flue_nb.runtime.core.delegation import ScopedSandbox
    from flue_nb.runtime.sandbox.local import LocalSandbox

    if isinstance(sandbox, LocalSandbox):
        return sandbox.cwd
    if isinstance(sandbox, ScopedSandbox) and local_root(getattr(sandbox, "_inner", None)) is not None:
        return sandbox.cwd
    return None


def file_effect(
    path: str, before: FileState, after: FileState, *, can_keep: bool
) -> tuple[FileEffect | None, dict[str, bytes]]:
    """The effect of a file going from `before` to `after` (None when it did not change), and the
    framed blob of its old content when kept."""
    if not before.exists and not after.exists:
        return None, {}
    if before.exists and after.exists and before.digest is not None and before.digest == after.digest:
        return None, {}
    action: FileAction = "created" if not before.exists else "deleted" if not after.exists else "changed"
    kept = not_kept = None
    blobs: dict[str, bytes] = {}
    if action != "created":
        if before.content is not None and can_keep:
            kept, data = frame_blob(before.content)
            blobs[kept] = data
        else:
            not_kept = "not kept: this run has no store" if before.content is not None else before.why or "not read"
    effect = FileEffect(
        path,
        action,
        before.digest,
        after.digest,
        before.size if before.exists else None,
        after.size if after.exists else None,
        kept,
        not_kept,
    )
    return effect, blobs


def record_files(
    details: dict[str, Any] | None,
    changes: Iterable[tuple[FileEffect, dict[str, bytes]]],
    ctx: Any,
    bounds: Bounds,
    *,
    scan_cut: str | None = None,
) -> dict[str, Any] | None:
    """`details` with the file effects added (`details["effects"]`), their blobs put in the store."""
    effects: list[FileEffect] = []
    blobs: dict[str, bytes] = {}
    omitted: list[str] = []
    used = 0
    for effect, kept in changes:
        if len(effects) >= bounds.items:
            omitted.append(effect.path)
            continue
        size = sum(len(b) for b in kept.values())
        if kept and used + size > bounds.step_bytes:
            effect = FileEffect(
                effect.path, effect.action, effect.before, effect.after, effect.size_before, effect.size_after,
                None, f"over the step's {_size(bounds.step_bytes)} cap",
            )  # fmt: skip
            kept = {}
        used += size if kept else 0
        effects.append(effect)
        blobs.update(kept)
    if not effects and not omitted and not scan_cut:
        return details
    record = Effects(
        files=tuple(effects),
        omitted=tuple(omitted),
        scan_cut=scan_cut,
        bounds=bounds.to_dict(),
        kept_bytes={d: len(b) for d, b in blobs.items()},
    )
    if blobs and ctx.store is not None:
        keep_blobs(ctx.store, ctx.conversation_id, blobs, bounds)
    # A `python` or `run_cell` call has its namespace effects in `details` already: one record.
    earlier = Effects.from_details(details)
    if earlier is not None:
        record = earlier.merged(record)
    return {**(details or {}), EFFECTS_KEY: record.to_dict()}


def workspace_changes(
    before: Scan, bounds: Bounds, *, can_keep: bool
) -> tuple[list[tuple[FileEffect, dict[str, bytes]]], str | None]:
    """After a command or code ran: the files it created, changed or deleted (a second scan of
    `before.root`, compared with `before`), and why a scan was cut (None when neither was)."""
    now = scan(before.root, bounds, read=False, skip=before.skip)
    cut = before.cut or now.cut
    return scan_changes(before, now, bounds, can_keep=can_keep), f"the workspace scan was {cut}" if cut else None


def scan_changes(
    before: Scan, after: Scan, bounds: Bounds, *, can_keep: bool
) -> list[tuple[FileEffect, dict[str, bytes]]]:
    """The files a command created, changed or deleted, from scans before and after it."""
    out: list[tuple[FileEffect, dict[str, bytes]]] = []
    for path in sorted(before.stats.keys() | after.stats.keys()):
        old, new = before.stats.get(path), after.stats.get(path)
        if old == new:
            continue
        if old is None:
            if before.cut:  # the scan before may just not have reached it
                continue
            was = FileState(False)
        else:
            content = before.contents.get(path)
            was = FileState(
                True,
                old[0],
                hashlib.sha256(content).hexdigest() if content is not None else None,
                content,
                None
                if content is not None
                else f"not read ahead (over {_size(bounds.scan_keep_bytes)} or the scan's total)",
            )
        now = file_state(path, bounds, keep=False) if new is not None else FileState(False)
        if new is None and after.cut:
            continue
        effect, blobs = file_effect(path, was, now, can_keep=can_keep)
        if effect is not None:
            out.append((effect, blobs))
    return out
