"""The "changes" panel of a settled run (issue 34.2): each cell, file and variable it changed.

`panel(store, items)` turns `runtime.undo.changes(...)` into `PanelItem`s: a one-line summary
(`df: DataFrame 10,000×12 → 9,812×12`, `+3 −1 lines`) and, for cell sources and text files, a
unified diff. A file's old content comes from its effect blob; its content after the step is
the next step's kept old content of the same path, or the file now when its digest still says
so; when neither is there the diff says why instead. Diffs are bounded (`DIFF_LINES`,
`DIFF_BYTES`): the panel is a review, not a copy of the files.

`ChangesPanel` renders one run's items as text, markdown and escaped HTML for the `%%flue` cell
view and the chat's static copy (they name `%flue undo 1.2` / `%flue undo all` / `%flue rewind
N`); the chat widget sends them as JSON (`chat.wire.ChangesJSON`) and draws Keep / Undo itself.
"""

from __future__ import annotations

import difflib
import hashlib
import html
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from flue_nb.runtime.effects import CellEffect, FileEffect, VariableEffect, unframe_blob
from flue_nb.runtime.undo import Change, Kind

__all__ = ["DIFF_BYTES", "DIFF_LINES", "PANEL_CSS", "ChangesPanel", "PanelItem", "headline", "panel"]

DIFF_LINES = 120
"""Most diff lines one item shows; the rest are counted."""
DIFF_BYTES = 256 * 1024
"""Contents larger than this (either side) get sizes and digests, no diff."""

Blobs = Callable[[str], bytes | None]


@dataclass(slots=True)
class PanelItem:
    """One changed cell, file or variable, as the panel shows it."""

    key: str
    """`STEP.ITEM` (what `%flue undo` takes)."""
    ident: str
    """`call_id:kind:index`: the item across the conversation."""
    step: int
    call_id: str
    tool: str
    kind: Kind
    action: str
    target: str = ""
    """What a person reads: a name, a path relative to the working directory, `cell <id>`."""
    title: str = ""
    """The full target (an absolute path, the notebook of a cell)."""
    summary: str = ""
    diff: list[str] = field(default_factory=list)
    """Unified diff lines (`@@`, `+`, `-`, ` ` prefixed), bounded."""
    diff_note: str = ""
    """Why there is no diff, or how much of it is left out."""
    lang: str = ""
    """The language of the diffed text (for colouring)."""
    undone: bool = False
    undoable: bool = True
    """False for what an undo leaves as it is (a cell's run)."""
    note: str = ""
    """What the record says could not be kept (an undo will refuse without `--force`)."""


def headline(items: Sequence[PanelItem]) -> str:
    """`3 changes: 1 cell, 1 file, 1 variable`."""
    counts = Counter(i.kind for i in items)
    parts = [f"{counts[k]} {k}{'s' if counts[k] != 1 else ''}" for k in ("cell", "file", "variable") if counts[k]]
    n = len(items)
    return f"{n} change{'s' if n != 1 else ''}: {', '.join(parts)}"


def panel(store: Any, items: Sequence[Change], *, cwd: str | None = None) -> list[PanelItem]:
    """The panel's items for `items` (one run's `changes`), in their order; a cell's run is
    left out (it changed no cell)."""
    blobs: Blobs = store.blob
    here = cwd if cwd is not None else os.getcwd()
    out: list[PanelItem] = []
    for n, c in enumerate(items):
        e = c.effect
        if isinstance(e, CellEffect) and e.action == "ran":
            continue  # running a cell changes no document; what its code changed is not a cell effect
        item = PanelItem(c.key, c.ident, c.step, c.call_id, c.tool, c.kind, e.action, undone=c.undone)
        if isinstance(e, VariableEffect):
            item.target = item.title = e.name
            item.summary, item.note = _variable(e), _not_kept(e)
        elif isinstance(e, FileEffect):
            item.target, item.title = _relative(e.path, here), e.path
            item.summary, item.note = _sizes(e), _not_kept(e)
            _file_diff(item, e, blobs, items[n + 1 :])
        else:
            assert isinstance(e, CellEffect)
            # As the undo line and `%flue changes` name it: the server's path of a live notebook
            # (`seven/review.ipynb`), a saved file's relative to here.
            where = _relative(e.notebook, here) if e.notebook and os.path.isabs(e.notebook) else e.notebook or ""
            item.target, item.title = f"cell {e.cell_id or '(new)'}", e.notebook or "the notebook"
            item.summary, item.lang = f"{e.action}{f' in {where}' if where else ''}", _cell_lang(e)
            item.undoable = e.action not in ("ran", "moved")
            if e.action in ("edited", "inserted", "deleted"):
                _set_diff(item, e.source_before or "", e.source_after or "")
        out.append(item)
    return out


def _variable(e: VariableEffect) -> str:
    was = e.before.describe() if e.before else ""
    now = e.after.describe() if e.after else ""
    if e.before and e.after and e.before.type == e.after.type and now.startswith(e.after.type + " "):
        now = now[len(e.after.type) + 1 :]  # `DataFrame 10,000×12 → 9,812×12`
    if e.action == "created":
        return f"{e.name}: created, {now}"
    if e.action == "deleted":
        return f"{e.name}: {was} → deleted"
    if e.before and e.after and e.before.describe() == e.after.describe():
        return f"{e.name}: {was}, changed"
    return f"{e.name}: {was} → {now}"


def _sizes(e: FileEffect) -> str:
    if e.action == "created":
        return f"created, {_bytes(e.size_after)}"
    if e.action == "deleted":
        return f"deleted, was {_bytes(e.size_before)}"
    return f"changed, {_bytes(e.size_before)} → {_bytes(e.size_after)}"


def _bytes(n: int | None) -> str:
    return "? bytes" if n is None else f"{n:,} byte{'s' if n != 1 else ''}"


def _not_kept(e: VariableEffect | FileEffect) -> str:
    if e.action == "created" or not e.not_kept:
        return ""
    what = "value" if isinstance(e, VariableEffect) else "content"
    return f"old {what} not kept: {e.not_kept}"


def _relative(path: str, here: str) -> str:
    try:
        rel = os.path.relpath(path, here)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _cell_lang(e: CellEffect) -> str:
    return "markdown" if e.cell_type == "markdown" else "python" if e.cell_type in ("code", None) else ""


_LANGS = {"py": "python", "md": "markdown", "js": "javascript", "ts": "typescript", "sh": "bash", "yml": "yaml"}


def _file_lang(path: str) -> str:
    ext = path.rsplit(".", 1)[-1].lower() if "." in os.path.basename(path) else ""
    return _LANGS.get(ext, ext if ext in ("json", "csv", "toml", "yaml", "sql", "html", "css", "r", "ini") else "")


def _kept(blobs: Blobs, digest: str | None) -> bytes | None:
    if digest is None:
        return None
    try:
        data = blobs(digest)
    except Exception:  # noqa: BLE001 - a blob that cannot be read: no diff, the item stays
        return None
    return unframe_blob(data) if data is not None else None


def _after(e: FileEffect, blobs: Blobs, later: Sequence[Change]) -> bytes | None:
    """The file's content right after the step, where something still holds it."""
    if e.action == "deleted":
        return b""
    for c in later:
        nxt = c.effect
        if isinstance(nxt, FileEffect) and nxt.path == e.path and nxt.before == e.after and nxt.before is not None:
            return _kept(blobs, nxt.kept)
    try:
        if os.path.getsize(e.path) > DIFF_BYTES:
            return None
        with open(e.path, "rb") as f:
            now = f.read()
    except OSError:
        return None
    return now if e.after is not None and hashlib.sha256(now).hexdigest() == e.after else None


def _file_diff(item: PanelItem, e: FileEffect, blobs: Blobs, later: Sequence[Change]) -> None:
    item.lang = _file_lang(e.path)
    big = max(e.size_before or 0, e.size_after or 0) > DIFF_BYTES
    if big:
        item.diff_note = f"no diff: over {DIFF_BYTES // 1024} KiB"
        return
    old = b"" if e.action == "created" else _kept(blobs, e.kept)
    if old is None:
        item.diff_note = "no diff: the old content was not kept"
        return
    new = _after(e, blobs, later)
    if new is None:
        item.diff_note = "no diff: the content after this step is no longer here (changed since)"
        return
    try:
        _set_diff(item, old.decode("utf-8"), new.decode("utf-8"))
    except UnicodeDecodeError:
        item.diff_note = "binary content: no diff"


def _set_diff(item: PanelItem, old: str, new: str) -> None:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2))[2:]
    if len(lines) > DIFF_LINES:
        item.diff_note = f"{len(lines) - DIFF_LINES:,} more diff lines not shown"
        lines = lines[:DIFF_LINES]
    item.diff = lines
    added = sum(1 for x in lines if x.startswith("+"))
    removed = sum(1 for x in lines if x.startswith("-"))
    if item.kind == "file" or item.action == "edited":
        item.summary += f" (+{added} −{removed} lines)"


PANEL_CSS = """<style>
.flue-changes{border:1px solid #d0d7de;border-radius:6px;padding:2px 8px;margin:6px 0}
.flue-changes>summary{cursor:pointer}
.flue-chg{margin:4px 0}
.flue-diff{font-size:85%;margin:2px 0 6px 0;padding:4px;overflow-x:auto;background:rgba(127,127,127,.06)}
.flue-diff .flue-add{background:rgba(46,160,67,.18);display:block}
.flue-diff .flue-del{background:rgba(248,81,73,.18);display:block}
.flue-diff .flue-hunk{color:#8250df;display:block}
.flue-diff .flue-ctx{display:block}
</style>"""


class ChangesPanel:
    """One settled run's changes, as the `%%flue` cell view and static copies show them."""

    def __init__(self, items: Sequence[PanelItem], *, title: str = "") -> None:
        self.items = list(items)
        self.title = title
        """What the run was (a static copy of a whole chat names each run's panel)."""

    def __bool__(self) -> bool:
        return bool(self.items)

    def _line(self, i: PanelItem) -> str:
        state = " [undone]" if i.undone else ""
        note = f" — {i.note}" if i.note and not i.undone else ""
        head = i.summary if i.kind == "variable" else f"{i.target}: {i.summary}"
        return f"{i.key} {i.tool}: {head}{note}{state}"

    def _hint(self) -> str:
        left = [i for i in self.items if i.undoable and not i.undone]
        if not left:
            return "all undone" if any(i.undone for i in self.items) else ""
        return f"undo: `%flue undo {left[0].key}` · `%flue undo all` · `%flue rewind {left[0].step}` (to before a step)"

    def _head(self) -> str:
        return f"{self.title}: {headline(self.items)}" if self.title else headline(self.items)

    def text_plain(self) -> str:
        """The panel as text lines: its headline, one line per item, how to undo."""
        if not self.items:
            return ""
        lines = [f"Δ {self._head()}", *(f"  {self._line(i)}" for i in self.items)]
        hint = self._hint()
        return "\n".join([*lines, f"  {hint.replace('`', '')}" if hint else ""]).rstrip()

    def markdown(self) -> str:
        """The panel as markdown (a list; no diffs: they are the HTML's)."""
        if not self.items:
            return ""
        rows = [f"- `{i.key}` {_md(self._line(i).split(' ', 1)[1])}" for i in self.items]
        hint = self._hint()
        return "\n".join([f"**Δ {_md(self._head())}**", "", *rows, *(["", f"*{hint}*"] if hint else [])])

    def html(self) -> str:
        """The panel as escaped HTML: collapsed to its headline, each item with its diff."""
        if not self.items:
            return ""
        rows = []
        for i in self.items:
            diff = _diff_html(i.diff) if i.diff else ""
            # An undone file's content after the step is gone with the undo: no note saying so.
            note = (
                f'<div class="flue-muted">{html.escape(i.diff_note)}</div>'
                if i.diff_note and i.kind != "variable" and not (i.undone and not i.diff)
                else ""
            )
            rows.append(
                f'<div class="flue-chg"><code>{html.escape(i.key)}</code> {html.escape(self._line(i).split(" ", 1)[1])}{diff}{note}</div>'
            )
        hint = self._hint().replace("`", "")
        summary = f"Δ {html.escape(self._head())} — review"
        foot = f'<div class="flue-muted">{html.escape(hint)}</div>' if hint else ""
        return f'{PANEL_CSS}<details class="flue-changes"><summary>{summary}</summary>{"".join(rows)}{foot}</details>'


def _diff_html(lines: Sequence[str]) -> str:
    out = []
    for x in lines:
        cls = (
            "flue-hunk"
            if x.startswith("@@")
            else "flue-add"
            if x.startswith("+")
            else "flue-del"
            if x.startswith("-")
            else "flue-ctx"
        )
        out.append(f'<span class="{cls}">{html.escape(x) or "&nbsp;"}</span>')
    return f'<pre class="flue-diff">{"".join(out)}</pre>'


def _md(text: str) -> str:
    from flue_nb.notebook.views.static import literal_markdown  # static draws panels: imported late

    return literal_markdown(text)
