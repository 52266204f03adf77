"""No prefix of a secret in what the notebook tools return (issue 32.2): `cells` summaries, `cell`,
`variables` previews and details, a stream or output cut by the log (a subagent's own answer:
tests/runtime/test_secrets_everywhere.py).

Each case puts the secret (with a quote and a backslash, so its repr- and JSON-escaped copies
differ from it) where a cut falls at every offset inside it, and looks for its first characters.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from flue_nb.notebook.celllog._bounded import _HALF_BYTES, STORE_CHARS, BoundedText, cut_text
from flue_nb.notebook.celllog.log import CellLog
from flue_nb.notebook.kernel.read_tools import NotebookContext, read_tools
from flue_nb.runtime.redact import redact
from flue_nb.runtime.tools.tool import ToolContext, execute_tool

SECRET = 'sk-adv-q7Zr9"XkLm2\\Vb8Nc4Pw6Ty1Ud3Hs5Jg0F'
PREFIX = "sk-adv"
"""Every spelling of the secret (as is, repr, JSON) starts with it; nothing else here has it."""


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUE_T_API_TOKEN", SECRET)


def _leak(text: str) -> str | None:
    """The text around a prefix of the secret (its first 3 characters or more), if there is one."""
    at = text.find(PREFIX[:3])
    return None if at < 0 else text[max(at - 20, 0) : at + 60]


def _tools(log: CellLog, ns: dict[str, object] | None = None) -> dict[str, object]:
    async def inline(fn):
        return fn()

    context = NotebookContext(lambda: dict(ns or {}), inline, log=lambda: log)
    return {t.name: t for t in read_tools(context)}


def _call(tool, raw) -> str:
    out = asyncio.run(execute_tool(tool, raw, ToolContext("c")))
    return out.content if isinstance(out.content, str) else str(out.content)


def _cell(log: CellLog, source: str, *, stdout: str = "", error: BaseException | None = None) -> None:
    record = log.start(source, cell_id=None, execution_count=len(log) + 1)
    if stdout:
        assert record._streams is not None
        record._streams["stdout"].write(stdout)
    log.finish(record.execution_count, error)


def _offsets(limit: int, lead: str = "") -> list[str]:
    """Filler such that a cut at `limit` characters falls 1..len(SECRET)+4 characters into the
    secret's escaped copy (as JSON shows it, the longest)."""
    return ["a" * max(limit - len(lead) - k, 0) for k in range(1, len(json.dumps(SECRET)) + 4)]


def test_cells_summaries_redact_before_their_cut() -> None:
    log = CellLog()
    for filler in _offsets(60):
        _cell(log, "print(token)", stdout=f"{filler}{SECRET} tail\n")
    for filler in _offsets(100):
        _cell(log, "raise ValueError(token)", error=ValueError(f"{filler}{SECRET}"))
        _cell(log, f"{filler}{SECRET}")  # the source's first line, cut at 100 characters
    text = _call(_tools(log)["cells"], {})
    assert text.count("\n") > 3 * len(_offsets(60)) - 5  # every entry is listed
    assert _leak(text) is None, _leak(text)


def test_cell_shows_a_json_escaped_secret_redacted() -> None:
    log = CellLog()
    _cell(log, "print(json.dumps(cfg))", stdout=json.dumps({"password": SECRET}) + "\n")
    text = _call(_tools(log)["cell"], {"id": "#1"})
    assert '{"password": "[redacted:FLUE_T_API_TOKEN]"}' in text
    assert _leak(text) is None


def test_variables_previews_and_details_redact_before_their_cut() -> None:
    ns: dict[str, object] = {}
    for i, filler in enumerate(_offsets(120, "'")):
        ns[f"s{i:02d}"] = filler + SECRET
        ns[f"j{i:02d}"] = json.dumps({"k": filler + SECRET})  # JSON-escaped, then repr-escaped
        ns[f"d{i:02d}"] = {"password": filler + SECRET}
    tools = _tools(CellLog(), ns)
    listing = _call(tools["variables"], {})
    assert "s00: str" in listing and "j00: str" in listing and "d00: dict" in listing
    assert _leak(listing) is None, _leak(listing)
    huge = "b" * (20_000 - 30) + SECRET + "b" * 100
    for name, value in (("huge", huge), ("huge_json", json.dumps([huge]))):
        detail = _call(_tools(CellLog(), {name: value})["variables"], {"name": name})
        assert f"{name}: str" in detail
        assert _leak(detail) is None, _leak(detail)


def test_a_dataframes_first_rows_hold_no_secret_prefix() -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"user": ["ann", "bob"], "token": [SECRET, "x" * 40 + SECRET]})
    detail = _call(_tools(CellLog(), {"df": df})["variables"], {"name": "df"})
    assert "pandas.DataFrame 2 rows" in detail and "[redacted:FLUE_T_API_TOKEN]" in detail
    assert _leak(detail) is None, _leak(detail)


def test_streams_and_outputs_cut_by_the_log_leave_no_prefix() -> None:
    # A giant line: the log keeps its start and its end, each cut at a byte bound (the prefix
    # shown is _HALF_BYTES - 3 bytes, then "…"; the suffix likewise).
    shown = _HALF_BYTES - 3
    for k in (1, 12, 20, 30):
        line = "c" * (shown - k) + SECRET + "c" * 200_000 + SECRET + "c" * (shown - len(SECRET) + k)
        stream = BoundedText()
        stream.write(line)
        for text in (stream.value(), cut_text(line)):
            assert "…" in text and len(text) < len(line)
            assert _leak(redact(text)) is None, _leak(redact(text))
            assert SECRET[-4:] not in redact(text)  # nor its end, where the tail was cut
    # A secret written across the head's bound, in a line the tail shows whole.
    stream = BoundedText()
    stream.write("g" * (STORE_CHARS - 10) + SECRET + "g" * 100)
    assert "…" in stream.value() and SECRET[-4:] not in redact(stream.value())
