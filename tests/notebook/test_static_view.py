"""The static bundle a settled cell or chat leaves (issue 19.1) and `%flue history`'s markdown (19.8)."""

from __future__ import annotations

from flue_nb.notebook.view.history import history_view
from flue_nb.notebook.view.static import StaticView, markdown_html
from flue_nb.notebook.view.transcript import TextView
from flue_nb.runtime.messages import AssistantMessage, TextPart, UserMessage


def test_markdown_html_renders_tables_code_and_escapes_raw_html() -> None:
    html = markdown_html("| a | b |\n|---|---|\n| 1 | 2 |\n\n`x` <script>alert(1)</script> <b onclick=1>")
    assert "<table>" in html and "<td>1</td>" in html
    assert "<code>x</code>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html and "<b " not in html


def test_static_view_carries_html_markdown_text_and_the_metadata_but_no_widget() -> None:
    data, meta = StaticView(TextView("plain", "**md**", {"k": 1}), title="t <1>")._repr_mimebundle_()
    assert set(data) == {"text/plain", "text/markdown", "text/html"}
    assert data["text/plain"] == "plain" and data["text/markdown"] == "**md**"
    assert '<div class="flue-static">' in data["text/html"] and "<strong>md</strong>" in data["text/html"]
    assert "t &lt;1&gt;" in data["text/html"]
    assert meta == {"flue": {"k": 1}}


def test_history_renders_headings_and_keeps_a_user_messages_lines() -> None:
    messages = [
        UserMessage(text="first line\nsecond line"),
        AssistantMessage([TextPart("### Result\nIt is **42**.")]),
        UserMessage(text="one line"),
    ]
    md = history_view("c", messages).md
    html = markdown_html(md)
    assert "<h3>Result</h3>" in html
    assert "first line<br />\nsecond line" in html
    assert "**user:** one line" in md  # a one-line message stays on the label's line


def test_help_markdown_has_no_dollar_outside_code_so_nothing_renders_as_latex() -> None:
    import re

    from flue_nb.notebook.magics._commands import help_view
    from flue_nb.notebook.magics.flue import FlueMagics

    md = help_view(FlueMagics.flue.parser).md
    outside_code = re.sub(r"`[^`]*`", "", md)
    assert "$" not in outside_code, [ln for ln in outside_code.splitlines() if "$" in ln]
    assert "`$FLUE_MODEL`" in md and "`$FLUE_DB`" in md


def test_the_no_model_error_is_a_short_list_of_the_ways_each_with_its_command() -> None:
    from flue_nb.notebook.assistant import NO_MODEL_HELP

    lines = NO_MODEL_HELP.splitlines()
    assert lines[0].startswith("flue: no model is configured") and len(lines) == 5
    assert all(ln.startswith("  • ") for ln in lines[1:])
    assert '%config FlueMagics.model = "anthropic/claude-sonnet-4-6"' in lines[1]
