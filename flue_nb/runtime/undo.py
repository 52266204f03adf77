"""Listing, undoing and rewinding what a conversation's tool calls changed (issue 34.2, 34.3).

`changes(store, cid, sid)` lists the items of one submission's `Effects` records, numbered
`STEP.ITEM` (steps counted from 1 within the run, in the order their results were recorded).
`undo` takes items back, `rewind` takes back every item of a step and of all later steps of the
conversation, newest first. Neither runs the agent's code again: old values come from the
store's blobs.

Exactness: before anything changes, each item is checked against what is there now (a file's
digest, a value's digest, a cell's source), in the order they would be undone, each check
seeing what the earlier undos would leave. An item that cannot be undone exactly (changed again
since, old value not kept, nothing to compare with) is reported and nothing changes, unless
`force`: then what can be restored is, and what cannot is said.

Crash safety: a rewind or undo is journalled. An `event` record `{"effects_undo": {...,
"state": "begun"}}` names its plan before the first change and one with `"state": "done"` follows
the last; files are restored by writing a temporary file and renaming it over the path. After a
crash in between, `recover` (called by the next `%flue`) finishes the plan for files and notebook
cells (each step is idempotent: a file is set to its recorded old digest or removed, a cell to
its old source), so they end in the new state, and records it; an item it cannot finish is named
as still in the state the agent left. The namespace is not journalled: the process that
held it is gone with the crash, and the new kernel's namespace is not touched by recovery.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

from flue_nb.runtime.effect_capture import summarize
from flue_nb.runtime.effects import Bounds, CellEffect, Effects, FileEffect, VariableEffect, unframe_blob

__all__ = [
    "Change",
    "UndoResult",
    "cell_target",
    "changes",
    "namespace_target",
    "recover",
    "rewind",
    "undo",
    "use_cells",
    "use_namespace",
]

JOURNAL_KEY = "effects_undo"
"""The key of the `event` records that journal an undo or a rewind."""

_ABSENT = "(absent)"

Kind = Literal["variable", "file", "cell"]


@dataclass(frozen=True, slots=True)
class Change:
    """One item of a run's effects, as `changes` lists it."""

    key: str
    """`STEP.ITEM` within its submission, e.g. `3.1`."""
    submission_id: str | None
    call_id: str
    step: int
    tool: str
    kind: Kind
    effect: VariableEffect | FileEffect | CellEffect
    index: int
    """Position among the call's effects of this kind (the record's own order)."""
    undone: bool = False
    seq: int = 0
    """The record's position in the conversation's stream (what orders items across steps)."""

    @property
    def ident(self) -> str:
        """A key that names the item across the conversation: `call_id:kind:index`."""
        return f"{self.call_id}:{self.kind}:{self.index}"

    @property
    def target(self) -> str:
        """What it changed: a name, a path or a cell id."""
        e = self.effect
        if isinstance(e, VariableEffect):
            return e.name
        if isinstance(e, FileEffect):
            return e.path
        return f"cell {e.cell_id}"

    def describe(self) -> str:
        """One line: `3.1 python: df changed (DataFrame 10,000×12 → DataFrame 9,812×12)`."""
        e = self.effect
        if isinstance(e, VariableEffect):
            was = e.before.describe() if e.before else ""
            now = e.after.describe() if e.after else ""
            detail = f"{was} → {now}" if was and now else was or now
            extra = f"; old value not kept: {e.not_kept}" if e.not_kept else ""
            text = f"`{e.name}` {e.action} ({detail}){extra}"
        elif isinstance(e, FileEffect):
            sizes = f"{e.size_before if e.size_before is not None else '-'} → {e.size_after if e.size_after is not None else '-'} bytes"
            extra = f"; old content not kept: {e.not_kept}" if e.not_kept else ""
            text = f"file {e.path} {e.action} ({sizes}){extra}"
        else:
            where = f" in {e.notebook}" if e.notebook else ""
            text = f"cell {e.cell_id or '(new code)'} {e.action}{where}"
        return f"{self.key} {self.tool}: {text}" + (" [undone]" if self.undone else "")


@dataclass(slots=True)
class UndoResult:
    """What an undo or rewind did, or why it did nothing."""

    done: bool
    undone: list[Change]
    refused: list[tuple[Change, str]]
    """Items that cannot be undone exactly, and why (nothing changed unless `forced`)."""
    skipped: list[tuple[Change, str]]
    """Items left as they are (not undoable: a cell's run; with `force`: a value not kept)."""
    forced: bool = False
    failed: list[tuple[Change, str]] = field(default_factory=list)
    """The item whose undo failed as it was done (the open tab did not answer, a file could not
    be written), then the items after it, not tried: the undo stopped there, and what it had
    undone stays undone."""
    where: dict[str, str] = field(default_factory=dict)
    """Where each restored cell was restored (`Change.ident` -> "in your open tab", "in the saved
    file ...: reload it"), as its notebook target said."""

    def text(self) -> str:
        """What a person (and the model's note) reads."""
        lines = []
        if not self.done:
            lines.append("Nothing was changed: these cannot be undone exactly (use force to undo the rest anyway):")
            lines += [f"  {c.describe()} — {why}" for c, why in self.refused]
        else:
            lines.append(f"Undone {len(self.undone)} item{'s' if len(self.undone) != 1 else ''}:")
            lines += [
                f"  {c.describe().replace(' [undone]', '')}"
                + (f" — {self.where[c.ident]}" if c.ident in self.where else "")
                for c in self.undone
            ]
            if self.refused:
                lines.append("Forced past:")
                lines += [f"  {c.key} {c.target} — {why}" for c, why in self.refused]
        if self.failed:
            lines.append("Stopped; not undone:")
            lines += [f"  {c.key} {c.target} — {why}" for c, why in self.failed]
        if self.skipped:
            lines.append("Left as they are:")
            lines += [f"  {c.key} {c.target} — {why}" for c, why in self.skipped]
        return "\n".join(lines)


# --- where variables and cells live ------------------------------------------------------------

NamespaceSource = Callable[[], MutableMapping[str, Any] | None]
CellTarget = Any
"""An object with `source(effect) -> str | None | Ellipsis` (the cell's source now, None when
absent, `...` when the notebook cannot be read) and `apply(effect) -> str | None` (undo one cell
effect; where it was restored, as a person reads it), and optionally `why_not(effect) -> str |
None` (why it cannot undo that effect at all), given by the notebook layer (`use_cells`)."""

_namespace: list[NamespaceSource] = []
_cells: list[CellTarget] = []
_lock = threading.RLock()


def use_namespace(source: NamespaceSource | None) -> None:
    """Where undo finds the namespace the `python` tool changed (the notebook layer sets it)."""
    _namespace[:] = [source] if source is not None else []


def use_cells(target: CellTarget | None) -> None:
    """How undo reads and restores notebook cells (the notebook layer sets it)."""
    _cells[:] = [target] if target is not None else []


def namespace_target() -> MutableMapping[str, Any] | None:
    """The namespace undo acts on now, if any."""
    return _namespace[0]() if _namespace else None


def cell_target() -> CellTarget | None:
    """The cell undoer, if any."""
    return _cells[0] if _cells else None


# --- listing ----------------------------------------------------------------------------------


def _undone(store: Any, cid: str, after_seq: int = 0) -> set[str]:
    out: set[str] = set()
    for r in store.records(cid, kinds=["event"], after_seq=after_seq):
        j = r.data.get(JOURNAL_KEY)
        if isinstance(j, Mapping) and j.get("state") == "done":
            out.update(str(i) for i in j.get("items") or ())
    return out


def changes(store: Any, conversation_id: str, submission_id: str | None = None) -> list[Change]:
    """The items one submission's tool calls changed (every submission's when None), in order."""
    records = store.records(conversation_id, kinds=["message"], submission_id=submission_id)
    if submission_id is not None and not records:
        return []  # nothing recorded (or not a submission): no journal to read, from the start
    # An item's undo is journalled after the item's own record: one run's listing reads the
    # journal from there on, not the whole conversation's (a chat lists each run it draws).
    undone = _undone(store, conversation_id, records[0].seq - 1 if records and submission_id else 0)
    out: list[Change] = []
    steps: dict[str | None, int] = {}
    for r in records:
        if r.data.get("kind") != "tool_result":
            continue
        step = steps[r.submission_id] = steps.get(r.submission_id, 0) + 1
        eff = Effects.from_details(r.data.get("details"))
        if eff is None:
            continue
        call_id, tool = str(r.data.get("call_id")), str(r.data.get("name"))
        items: list[tuple[Kind, Any]] = [("variable", v) for v in eff.variables]
        items += [("file", f) for f in eff.files]
        items += [("cell", c) for c in eff.cells]
        counters: dict[str, int] = {}
        for n, (kind, effect) in enumerate(items, 1):
            index = counters[kind] = counters.get(kind, -1) + 1
            ident = f"{call_id}:{kind}:{index}"
            out.append(
                Change(f"{step}.{n}", r.submission_id, call_id, step, tool, kind, effect, index, ident in undone, r.seq)
            )
    return out


# --- checking and applying --------------------------------------------------------------------


def _file_now(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        return None
    except OSError:
        return "(unreadable)"


def _value_now(ns: Mapping[str, Any] | None, name: str) -> str | None:
    if ns is None:
        return "(no namespace)"
    if name not in ns:
        return None
    return summarize(ns[name], Bounds()).digest or "(no digest)"


def _now(change: Change, ns: Mapping[str, Any] | None) -> str | None:
    """The state of the item's target now: a digest, None when absent."""
    e = change.effect
    if isinstance(e, FileEffect):
        return _file_now(e.path)
    if isinstance(e, VariableEffect):
        return _value_now(ns, e.name)
    target = cell_target()
    if target is None:
        return "(no notebook)"
    source = target.source(e)
    return "(unreadable notebook)" if source is ... else _text_digest(source)


_UNREADABLE = {
    "(no notebook)": "no notebook is known here",
    "(unreadable notebook)": "the notebook could not be read (no open tab answered, or the file is unreadable)",
    "(unreadable)": "the file could not be read",
}


def _text_digest(text: str | None) -> str | None:
    return None if text is None else "text:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _states(change: Change) -> tuple[str | None, str | None]:
    """(state before the call, state after it), as `_now` would read them; `?` when unknown."""
    e = change.effect
    if isinstance(e, FileEffect):
        return (
            None if e.action == "created" else e.before or "?",
            None if e.action == "deleted" else e.after or "?",
        )
    if isinstance(e, VariableEffect):
        return (
            None if e.action == "created" else (e.before.digest if e.before and e.before.digest else "?"),
            None if e.action == "deleted" else (e.after.digest if e.after and e.after.digest else "?"),
        )
    before = None if e.action == "inserted" else _text_digest(e.source_before)
    after = None if e.action == "deleted" else _text_digest(e.source_after)
    return before, after


def _why_not(change: Change, store: Any) -> str | None:
    """Why the old state cannot be restored at all (nothing to restore), or None."""
    e = change.effect
    if isinstance(e, CellEffect):
        if e.action == "ran":
            return "running a cell is not undone (undo what it changed instead)"
        if e.action == "moved":
            return "moving a cell back is not supported yet"
        target = cell_target()
        if target is None:
            return "no notebook to restore the cell in"
        check = getattr(target, "why_not", None)
        return check(e) if check is not None else None
    if e.action == "created":
        return None
    if e.kept is None:
        return f"the old {'value' if isinstance(e, VariableEffect) else 'content'} was not kept ({e.not_kept})"
    if store.blob(e.kept) is None:
        return "the old value was dropped by the conversation's cap"
    return None


def _plan(
    items: list[Change], store: Any, ns: Mapping[str, Any] | None
) -> tuple[list[Change], list[tuple[Change, str]], list[tuple[Change, str]]]:
    """Check `items` (in the order they would be undone): (doable, refused, skipped)."""
    doable: list[Change] = []
    refused: list[tuple[Change, str]] = []
    skipped: list[tuple[Change, str]] = []
    seen: dict[str, str | None] = {}
    for c in items:
        if isinstance(c.effect, CellEffect) and c.effect.action == "ran":
            skipped.append((c, "running a cell is not undone (undo what it changed instead)"))
            continue
        if c.kind == "variable" and ns is None:
            refused.append((c, "no namespace here to restore it in (undo from the kernel it ran in)"))
            continue
        key = f"{c.kind}:{c.target}"
        current = seen[key] if key in seen else _now(c, ns)
        before, after = _states(c)
        why = _why_not(c, store)
        if why is not None:
            refused.append((c, why))
        elif after == "?":
            refused.append(
                (
                    c,
                    "its state after the step was not recorded (too big to digest), so a later change cannot be ruled out",
                )
            )
        elif current in _UNREADABLE:
            refused.append((c, f"cannot be checked now: {_UNREADABLE[current]}"))
        elif current != after:
            refused.append((c, "changed again since" if current is not None else "gone since"))
        else:
            doable.append(c)
        seen[key] = before
    return doable, refused, skipped


def _atomic_write(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".flue-undo-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _payload(store: Any, digest: str) -> bytes:
    data = store.blob(digest)
    payload = unframe_blob(data) if data is not None else None
    if payload is None:
        raise LookupError(f"blob {digest} is not kept")
    return payload


def _apply_file(c: Change, store: Any) -> None:
    e = c.effect
    assert isinstance(e, FileEffect)
    if e.action == "created":
        if os.path.lexists(e.path):
            os.unlink(e.path)
    elif e.kept is not None:
        old = _payload(store, e.kept)
        if _file_now(e.path) != hashlib.sha256(old).hexdigest():
            _atomic_write(e.path, old)


def _apply(c: Change, store: Any, ns: MutableMapping[str, Any] | None) -> str | None:
    """Undo one item; where a cell was restored, when its target says."""
    e = c.effect
    if isinstance(e, FileEffect):
        _apply_file(c, store)
    elif isinstance(e, VariableEffect):
        assert ns is not None
        if e.action == "created":
            ns.pop(e.name, None)
        elif e.kept is not None:
            ns[e.name] = pickle.loads(_payload(store, e.kept))  # noqa: S301 - our own pickle of the user's value
    else:
        target = cell_target()
        if target is not None:
            where = target.apply(e)
            return where if isinstance(where, str) else None
    return None


def _journal(store: Any, cid: str, data: dict[str, Any]) -> None:
    store.append(cid, None, [("event", {JOURNAL_KEY: data})], now=time.time())


def _run(
    store: Any,
    cid: str,
    items: list[Change],
    *,
    force: bool,
    what: str,
    namespace: MutableMapping[str, Any] | None,
    crash_at: Callable[[int], None] | None = None,
) -> UndoResult:
    with _lock:
        ns = namespace if namespace is not None else namespace_target()
        doable, refused, skipped = _plan([c for c in items if not c.undone], store, ns)
        if refused and not force:
            return UndoResult(False, [], refused, skipped)
        if force:
            # Forced: restore what has something to restore; the rest stays as it is.
            doable = [c for c in items if not c.undone and c not in [s for s, _ in skipped]]
            doable = [c for c in doable if _why_not(c, store) is None and not (c.kind == "variable" and ns is None)]
        if not doable:
            return UndoResult(True, [], refused, skipped, force)
        jid = uuid.uuid4().hex[:12]
        plan = [_plan_entry(c) for c in doable]
        begun = {"id": jid, "state": "begun", "what": what, "plan": plan, "items": [c.ident for c in doable]}
        _journal(store, cid, {**begun, "force": True} if force else begun)
        undone: list[Change] = []
        failed: list[tuple[Change, str]] = []
        where: dict[str, str] = {}
        for n, c in enumerate(doable):
            if crash_at is not None:
                crash_at(n)
            try:
                place = _apply(c, store, ns)
            except Exception as exc:  # noqa: BLE001 - said, and the journal closed on what was done
                failed = [(c, f"{type(exc).__name__}: {exc}")]
                failed += [(later, "not tried: the undo stopped at the item before") for later in doable[n + 1 :]]
                break
            undone.append(c)
            if place:
                where[c.ident] = place
        end: dict[str, Any] = {"id": jid, "state": "done", "what": what, "items": [c.ident for c in undone]}
        if failed:
            end["failed"] = [c.ident for c, _ in failed]
        _journal(store, cid, end)
        return UndoResult(True, undone, refused, skipped, force, failed, where)


def _plan_entry(c: Change) -> dict[str, Any]:
    return {"ident": c.ident, "kind": c.kind, "effect": c.effect.to_dict()}


def undo(
    store: Any,
    conversation_id: str,
    items: Iterable[Change],
    *,
    force: bool = False,
    namespace: MutableMapping[str, Any] | None = None,
) -> UndoResult:
    """Undo `items` (newest first), all or nothing unless `force`."""
    ordered = sorted(items, key=_order, reverse=True)
    return _run(store, conversation_id, ordered, force=force, what="undo", namespace=namespace)


def rewind(
    store: Any,
    conversation_id: str,
    submission_id: str,
    step: int | str,
    *,
    force: bool = False,
    namespace: MutableMapping[str, Any] | None = None,
    crash_at: Callable[[int], None] | None = None,
) -> UndoResult:
    """Undo every effect of `step` (its number in the submission, or its tool call id) and of
    every later step of the conversation, newest first."""
    every = changes(store, conversation_id)
    start = next(
        (
            i
            for i, c in enumerate(every)
            if c.submission_id == submission_id and (c.step == step or c.call_id == step or str(c.step) == str(step))
        ),
        None,
    )
    if start is None:
        raise LookupError(f"no step {step} with recorded effects in submission {submission_id}")
    later = sorted(every[start:], key=_order, reverse=True)
    return _run(
        store, conversation_id, later, force=force, what=f"rewind to before step {step}", namespace=namespace,
        crash_at=crash_at,
    )  # fmt: skip


def _order(c: Change) -> tuple[int, int]:
    return c.seq, int(c.key.rsplit(".", 1)[-1]) if "." in c.key else 0


def recover(store: Any, conversation_id: str) -> str | None:
    """Finish an undo or rewind a crash cut off (files and notebook cells), record it, and say
    so; None when there was nothing to finish."""
    begun: dict[str, dict[str, Any]] = {}
    for r in store.records(conversation_id, kinds=["event"]):
        j = r.data.get(JOURNAL_KEY)
        if not isinstance(j, Mapping):
            continue
        if j.get("state") == "begun":
            begun[str(j.get("id"))] = dict(j)
        elif j.get("state") in ("done", "recovered"):
            begun.pop(str(j.get("id")), None)
    if not begun:
        return None
    lines = []
    for jid, j in begun.items():
        finished: list[str] = []
        left: list[str] = []
        failed: list[str] = []
        done: list[str] = []
        for entry in j.get("plan") or ():
            c = _from_plan(entry)
            if c is None:
                continue
            outcome, why = _finish(c, store, forced=bool(j.get("force")))
            if outcome == "failed":
                failed.append(f"{c.target} ({why})")
                continue
            (finished if outcome == "restored" else left).append(c.target)
            done.append(str(entry.get("ident")))
        _journal(
            store, conversation_id,
            {"id": jid, "state": "done", "what": j.get("what"), "items": done, "recovered": True},
        )  # fmt: skip
        if failed:
            text = (
                f"A {j.get('what')} was cut off by a crash; finishing it failed for {len(failed)} item(s), "
                f"which are still as the agent left them (not undone): {'; '.join(failed)}; "
                f"{len(finished)} file/cell item(s) restored"
            )
        else:
            text = (
                f"A {j.get('what')} was cut off by a crash; it is now finished (the new state): "
                f"{len(finished)} file/cell item(s) restored"
            )
        if left:
            text += (
                f"; variables not restored ({', '.join(left)}): the kernel that held them is gone, "
                "and this kernel's namespace was not touched"
            )
        lines.append(text + ".")
    return "\n".join(lines)


def _finish(c: Change, store: Any, *, forced: bool) -> tuple[Literal["restored", "left", "failed"], str]:
    """Finish one item of a plan a crash cut off: restored, left (a variable: its kernel is
    gone), or failed and why."""
    if c.kind == "variable":
        return "left", ""
    target = cell_target()
    if c.kind == "cell" and target is None:
        return "failed", "no notebook here to restore it in"
    if not forced and _now(c, None) not in _states(c):
        # Neither as the step left it nor as the undo would: someone changed it since.
        return "failed", "changed since the crash: left as it is"
    try:
        if c.kind == "file":
            _apply_file(c, store)
        elif target is not None:
            target.apply(c.effect)
    except Exception as exc:  # noqa: BLE001 - said: this item stays as the step left it
        return "failed", f"{type(exc).__name__}: {exc}"
    return "restored", ""


def _from_plan(entry: Mapping[str, Any]) -> Change | None:
    kind = entry.get("kind")
    effect: Any
    if kind == "file":
        effect = FileEffect.from_dict(entry.get("effect"))
    elif kind == "variable":
        effect = VariableEffect.from_dict(entry.get("effect"))
    elif kind == "cell":
        effect = CellEffect.from_dict(entry.get("effect"))
    else:
        return None
    if effect is None:
        return None
    return Change("?", None, str(entry.get("ident")), 0, "", kind, effect, 0)
