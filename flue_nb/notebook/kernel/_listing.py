"""The text of the read tools: one line per cell for `cells`, one cell whole for `cell`.

Pure formatting of `CellRecord`s and `NotebookCell`s; the marks compare what ran with what the
document holds now (edited since it ran, never run, run out of order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flue_nb.notebook.celllog.log import CellRecord
from flue_nb.notebook.document.protocol import NotebookCell
from flue_nb.notebook.kernel._envelope import safe_id, safe_type
from flue_nb.runtime.redact import redact

__all__ = ["Entry", "cell_header", "cell_text", "document_entries", "execution_entries", "record_line"]

_SOURCE_CHARS = 100
_SUMMARY_CHARS = 100
MARKS = {
    "edited": "✎ edited since it ran",
    "never": "○ never run in this kernel",
    "order": "↕ ran before a cell above it last ran (out of order)",
    "rerun": "↻ run again later",
}


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of the `cells` listing."""

    text: str
    marks: tuple[str, ...] = ()


def _first_line(text: str, limit: int) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return "(empty)"
    first = lines[0].strip()
    more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
    if len(first) > limit:
        first = redact(first)  # before the cut: a cut secret would no longer be recognised
        first = first[: limit - 1] + "…" if len(first) > limit else first
    return first + more


def output_summary(record: CellRecord) -> str:
    """One line saying what a run left: its error, else its streams and outputs."""
    if record.outcome == "running":
        return "running"
    if record.error is not None:
        return f"{record.error.type}: {_first_line(record.error.message, _SUMMARY_CHARS)}"
    parts = []
    for name in ("stdout", "stderr"):
        text = record.stream(name)
        if text.strip():
            n = text.count("\n") + (0 if text.endswith("\n") else 1)
            parts.append(f"{name} {n} line{'s' if n != 1 else ''}: {_first_line(text, 60)}")
    for output in record.outputs[:3]:
        data = output.get("data", {})
        images = [m for m in data if m.startswith("image/")]
        if images:
            parts.append(f"image ({images[0]})")
        elif "text/plain" in data:
            label = "Out" if output["output_type"] == "execute_result" else "display"
            parts.append(f"{label}: {_first_line(str(data['text/plain']), 60)}")
    more = len(record.outputs) - 3 + record.outputs_dropped
    if more > 0:
        parts.append(f"+{more} outputs")
    if record.text_dropped:
        parts.append("(outputs no longer kept)")
    return "; ".join(parts) if parts else "no output"


def record_line(record: CellRecord, marks: Sequence[str] = ()) -> str:
    """`#N [count] id … kind outcome · first source line → output summary`."""
    count = f"[{record.execution_count}]" if record.execution_count is not None else "[ ]"
    ident = f" id={record.cell_id}" if record.cell_id else ""
    kind = {"flue": " %%flue (your conversation, not a user cell)", "agent": " run by you (run_cell)"}.get(
        record.kind, ""
    )
    outcome = "ok" if record.outcome == "ok" else ("error" if record.outcome == "error" else "running")
    source = _first_line(record.source, _SOURCE_CHARS)
    if record.kind == "flue":  # the message, not the magic's name
        magic, _, message = record.source.strip().partition("\n")
        source = _first_line(f"{magic}: {message}" if message.strip() else magic, _SOURCE_CHARS)
    mark = f" {' '.join(MARKS[m].split(' ', 1)[0] for m in marks)}" if marks else ""
    line = f"#{record.number} {count}{ident}{kind} {outcome}{mark} · {source}"
    if record.kind != "flue":
        line += f" → {output_summary(record)}"
    return line


def _match(record: CellRecord, cells: Sequence[NotebookCell]) -> NotebookCell | None:
    if record.cell_id:
        for cell in cells:
            if cell.id == record.cell_id:
                return cell
    return None


def execution_entries(records: Sequence[CellRecord], cells: Sequence[NotebookCell] | None) -> list[Entry]:
    """The log in execution order, each run marked against the document when there is one."""
    latest: dict[str, int] = {}
    for r in records:
        if r.cell_id:
            latest[r.cell_id] = r.number
    out = []
    for r in records:
        marks: list[str] = []
        if r.cell_id and latest.get(r.cell_id) != r.number:
            marks.append("rerun")
        elif cells is not None and r.kind == "user":
            cell = _match(r, cells)
            if cell is not None and cell.source.strip() != r.source.strip():
                marks.append("edited")
        out.append(Entry(record_line(r, marks), tuple(marks)))
    return out


def document_entries(records: Sequence[CellRecord], cells: Sequence[NotebookCell]) -> list[Entry]:
    """The document's cells in order, each with its last run in this kernel (matched by cell id,
    else by identical source)."""
    by_id: dict[str, CellRecord] = {}
    by_source: dict[str, CellRecord] = {}
    for r in records:
        if r.kind == "flue":
            continue
        if r.cell_id:
            by_id[r.cell_id] = r
        by_source[r.source.strip()] = r
    out = []
    newest_above = 0
    for index, cell in enumerate(cells, 1):
        head = f"{index}. id={cell.id} {cell.kind}"
        if cell.kind != "code":
            out.append(Entry(f"{head} · {_first_line(cell.source, _SOURCE_CHARS)}"))
            continue
        record = by_id.get(cell.id) or by_source.get(cell.source.strip())
        if record is None:
            if cell.source.strip().startswith("%%flue") or cell.source.strip().startswith("%flue"):
                out.append(Entry(f"{head} %%flue · {_first_line(cell.source, _SOURCE_CHARS)}"))
                continue
            saved = f" (saved count [{cell.execution_count}])" if cell.execution_count is not None else ""
            line = f"{head} ○{saved} · {_first_line(cell.source, _SOURCE_CHARS)}"
            out.append(Entry(line, ("never",)))
            continue
        marks = []
        if record.source.strip() != cell.source.strip():
            marks.append("edited")
        if record.number < newest_above:
            marks.append("order")
        newest_above = max(newest_above, record.number)
        symbols = " ".join(MARKS[m].split(" ", 1)[0] for m in marks)
        ran = f"ran as #{record.number} [{record.execution_count}] {record.outcome}"
        line = f"{head} {ran}{' ' + symbols if symbols else ''} · {_first_line(cell.source, _SOURCE_CHARS)}"
        if "edited" not in marks:
            line += f" → {output_summary(record)}"
        out.append(Entry(line, tuple(marks)))
    return out


def cell_header(record: CellRecord | None, cell: NotebookCell | None) -> str:
    """One stable line naming the cell and how its last run ended (outside the envelope)."""
    if record is None:
        return f"Cell id={safe_id(cell.id) if cell else '?'}: not run in this kernel."
    count = record.execution_count if record.execution_count is not None else " "
    if record.error is not None:
        known = safe_type(record.error.type)
        return f"Cell #{record.number} [{count}]: error ({known or 'its type is in the text below'})."
    return f"Cell #{record.number} [{count}]: {record.outcome}."


def cell_text(record: CellRecord | None, cell: NotebookCell | None) -> str:
    """One cell whole: what the document holds and what its last run here left."""
    parts = []
    if record is not None:
        count = record.execution_count if record.execution_count is not None else " "
        when = f"{record.duration:.3f} s" if record.duration is not None else "still running"
        ident = f" id={record.cell_id}" if record.cell_id else ""
        kind = {"flue": " (%%flue cell)", "agent": " (run by you with run_cell)"}.get(record.kind, "")
        parts.append(f"Cell #{record.number} [{count}]{ident}{kind}: {record.outcome}, {when}")
        if cell is not None and cell.source.strip() != record.source.strip():
            parts.append("The document's source changed since this run. Source as it ran:")
        else:
            parts.append("Source:")
        parts.append(record.source.rstrip("\n"))
        if cell is not None and cell.source.strip() != record.source.strip():
            parts.append("Source in the document now:")
            parts.append(cell.source.rstrip("\n"))
        for name in ("stdout", "stderr"):
            text = record.stream(name)
            if text:
                parts.append(f"{name}:")
                parts.append(text.rstrip("\n"))
        for output in record.outputs:
            parts.extend(_output_lines(output))
        if record.outputs_dropped:
            parts.append(f"({record.outputs_dropped} more outputs were not kept)")
        if record.text_dropped:
            parts.append("(this cell's streams and outputs are no longer kept: the log keeps recent cells' output)")
        if record.error is not None:
            parts.append(f"Error: {record.error.type}: {record.error.message}")
            parts.append(record.error.traceback.rstrip("\n"))
    elif cell is not None:
        saved = f" [{cell.execution_count}]" if cell.execution_count is not None else ""
        parts.append(f"Cell id={cell.id} ({cell.kind}){saved}: not run in this kernel. Source:")
        parts.append(cell.source.rstrip("\n"))
        for saved_output in cell.outputs:
            parts.extend(_output_lines(dict(saved_output), saved=True))
    return "\n".join(parts)


def _output_lines(output: dict[str, object], *, saved: bool = False) -> list[str]:
    kind = str(output.get("output_type", "output"))
    prefix = "saved " if saved else ""
    if kind == "stream":
        return [f"{prefix}{output.get('name', 'stream')}:", str(output.get("text", "")).rstrip("\n")]
    if kind == "error":
        tb = output.get("traceback", [])
        from flue_nb.notebook.celllog.log import strip_ansi

        text = strip_ansi("\n".join(tb) if isinstance(tb, list) else str(tb))
        return [f"{prefix}error: {output.get('ename')}: {output.get('evalue')}", text]
    data = output.get("data", {})
    lines = []
    if isinstance(data, dict):
        for mime, value in data.items():
            if mime.startswith("image/"):
                lines.append(f"{prefix}{kind} {mime}: (image, shown below when still kept)")
            elif mime in ("text/plain", "text/markdown") or (mime == "text/html" and "text/plain" not in data):
                text = "".join(value) if isinstance(value, list) else str(value)
                lines.extend([f"{prefix}{kind} {mime}:", text.rstrip("\n")])
    return lines
