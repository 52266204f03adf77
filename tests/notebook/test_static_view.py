"""The static bundle a settled cell or chat leaves (issue 19.1) and `%flue history`'s markdown (19.8)."""

from __future__ import annotations

import base64
import hashlib
import io
import re

import pytest

from flue_nb.notebook.views.figures import STATIC_BYTES, STATIC_EDGE, Figure
from flue_nb.notebook.views.history import history_view
from flue_nb.notebook.views.static import Block, StaticView, markdown_html
from flue_nb.notebook.views.transcript import CellView, TextView
from flue_nb.runtime import events as ev
from flue_nb.runtime.images import sniff
from flue_nb.runtime.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)


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

    from flue_nb.notebook.magics.commands import help_view
    from flue_nb.notebook.magics.flue import FlueMagics

    md = help_view(FlueMagics.flue.parser).md
    outside_code = re.sub(r"`[^`]*`", "", md)
    assert "$" not in outside_code, [ln for ln in outside_code.splitlines() if "$" in ln]
    assert "`$FLUE_MODEL`" in md and "`$FLUE_DB`" in md


def test_the_no_model_error_is_a_short_list_of_the_ways_each_with_its_command() -> None:
    from flue_nb.notebook.kernel.assistant import NO_MODEL_HELP

    lines = NO_MODEL_HELP.splitlines()
    assert lines[0].startswith("flue: no model is configured") and len(lines) == 6
    assert all(ln.startswith("  • ") for ln in lines[1:])
    assert lines[1].startswith("  • %env ANTHROPIC_API_KEY=")  # works without a restart
    assert '%config FlueMagics.model = "anthropic/claude-sonnet-4-6"' in lines[2]


# --- figures in the static copies (issue 19.1 + 19.4) -----------------------------------------


def _png(width: int, height: int, color: str = "teal") -> bytes:
    PIL = pytest.importorskip("PIL.Image", reason="Pillow (the `images` extra) draws the test's PNGs")
    buf = io.BytesIO()
    PIL.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


def _image(data: bytes, label: str = "figure 1") -> ImagePart:
    kind, width, height = sniff(data) or ("", 0, 0)
    return ImagePart(kind, hashlib.sha256(data).hexdigest(), width, height, label, data=data)


def _cell_with_figure(image: ImagePart) -> CellView:
    view = CellView("plot it", "c1", submission_id="s1")
    for e in [
        ev.SubmissionRunning(submission_id="s1", attempt=1, agent="a"),
        ev.ToolStart(submission_id="s1", call_id="c", name="python", input={"code": "plt.plot([1, 3])"}),
        ev.ToolEnd(submission_id="s1", call_id="c", name="python", is_error=False, content="", images=(image,)),
        ev.TextDelta(submission_id="s1", delta="The line rises."),
        ev.SubmissionSettled(submission_id="s1", outcome="completed", result="The line rises."),
    ]:
        view.apply(e)
    view.settle("completed")
    return view


def _data_uris(html: str) -> list[str]:
    return re.findall(r'src="(data:[^"]*)"', html)


def test_a_cells_static_copy_draws_its_figure_in_the_tool_cards_place_once() -> None:
    image = _image(_png(64, 48))
    view = _cell_with_figure(image)
    assert view.text_plain().split("\n") == [
        "· python: plt.plot([1, 3]) ✓",
        "    [figure 1: 64×48 PNG]",
        "The line rises.",
        "[✓ completed]",
    ]
    data, _ = StaticView(view)._repr_mimebundle_()
    html = data["text/html"]
    [uri] = _data_uris(html)  # the bytes once in the output: the markdown names the figure
    assert base64.b64decode(uri.split(",", 1)[1]) == image.data
    assert "base64" not in data["text/markdown"] and "[figure 1: 64×48 PNG]" in data["text/markdown"]
    # In place: after the call's line, before the answer that follows it.
    assert html.index("<strong>python</strong>") < html.index(uri) < html.index("The line rises.")
    assert "<details>" in html and 'title="click for full size"' in html and "<style>" in html


def test_a_figure_not_seen_live_is_read_from_the_store() -> None:
    data = _png(30, 20, "red")
    image = _image(data)
    asked: list[str] = []

    def blob(digest: str) -> bytes | None:
        asked.append(digest)
        return data if digest == image.digest else None

    blocks: list[Block] = ["> ▸ **python** `plot()` ✓", Figure(image.digest, "image/png", 30, 20, "figure 2")]
    html = StaticView(TextView("x", "x", blocks=blocks), blobs=blob)._repr_mimebundle_()[0]["text/html"]
    assert asked == [image.digest] and len(_data_uris(html)) == 1
    missing = Figure("00" * 32, "image/png", 30, 20, "figure 3")
    html = StaticView(TextView("x", "x", blocks=[missing]), blobs=blob)._repr_mimebundle_()[0]["text/html"]
    assert not _data_uris(html) and "[figure 3: 30×20 PNG] (not shown: its bytes are not in the store)" in html


def test_a_big_figure_is_scaled_down_to_the_static_cap() -> None:
    image = _image(_png(3000, 1500))
    [uri] = _data_uris(StaticView(_cell_with_figure(image))._repr_mimebundle_()[0]["text/html"])
    head = sniff(base64.b64decode(uri.split(",", 1)[1]))
    assert head is not None and head[1:] == (STATIC_EDGE, STATIC_EDGE // 2)
    assert len(uri) < STATIC_BYTES * 4 // 3 + 100


def test_only_png_jpeg_gif_and_webp_become_data_uris() -> None:
    svg = b'<svg xmlns="x" width="10" height="10"><script>alert(1)</script></svg>'
    claims_svg = Figure(hashlib.sha256(svg).hexdigest(), "image/svg+xml", 10, 10, "drawing", data=svg)
    lies = Figure(hashlib.sha256(svg).hexdigest() + "0", "image/png", 10, 10, "fake", data=svg)
    label = Figure("11" * 32, "image/png", 4, 4, '<img src=x onerror="alert(1)">', data=_png(4, 4))
    html = StaticView(TextView("x", "x", blocks=[claims_svg, lies, label]))._repr_mimebundle_()[0]["text/html"]
    assert "image/svg+xml is not embedded" in html and "not a PNG, JPEG, GIF or WebP image" in html
    assert [u.split(";")[0] for u in _data_uris(html)] == ["data:image/png"]
    assert "<script>" not in html and 'onerror="' not in html and "&lt;img src=x" in html


def test_history_embeds_figures_in_its_markdown_and_the_chats_copy_only_in_its_html() -> None:
    image = _image(_png(40, 30))
    call = ToolCall("c", "python", {"code": "plt.plot([1, 2])"})
    messages: list[Message] = [
        UserMessage(text="plot it"),
        AssistantMessage([TextPart("Plotting."), call]),
        ToolResultMessage("c", "python", "", images=[image]),
        AssistantMessage([TextPart("Done.")]),
    ]
    view = history_view("c1", messages)
    assert "    [figure 1: 40×30 PNG]" in view.plain.split("\n")
    assert view.md.count("data:image/png;base64,") == 1  # %flue history shows the image
    copy = StaticView(history_view("c1", messages, embed=False))._repr_mimebundle_()[0]
    assert "base64" not in copy["text/markdown"] and len(_data_uris(copy["text/html"])) == 1
    html = copy["text/html"]
    assert html.index("<strong>python</strong>") < html.index("data:image/png") < html.index("Done.")


def test_history_pairs_each_call_with_its_own_result_when_ids_repeat() -> None:
    # Issue 33.3: the same call id in two turns (a restarted kernel's offline model, llama.cpp).
    messages: list[Message] = [
        UserMessage(text="first"),
        AssistantMessage([ToolCall("call_1", "bash", {"command": "false"})]),
        ToolResultMessage("call_1", "bash", "exit 1", is_error=True),
        AssistantMessage([TextPart("It failed.")]),
        UserMessage(text="again"),
        AssistantMessage([ToolCall("call_1", "bash", {"command": "true"})]),
        ToolResultMessage("call_1", "bash", "ok"),
        AssistantMessage([TextPart("It worked.")]),
    ]
    lines = history_view("c", messages).plain.split("\n")
    assert [line for line in lines if "bash" in line] == ["  · bash: false ✗", "  · bash: true ✓"]


def test_static_copies_keep_code_spans_in_errors_and_name_no_empty_argument() -> None:
    # Issue 33.7: `old\_text` showed its backslash; a `run_cell` with no source showed "``".
    view = CellView("fix it", "c", submission_id="s")
    for e in [
        ev.ToolStart(submission_id="s", call_id="c1", name="edit", input={"path": "a_b.py", "old_text": "x"}),
        ev.ToolEnd(
            submission_id="s",
            call_id="c1",
            name="edit",
            is_error=True,
            content="Could not find `old_text` in `a_b.py`. Use *exactly* the file's text.",
        ),  # fmt: skip
        ev.SubmissionSettled(submission_id="s", outcome="completed", result="ok"),
    ]:
        view.apply(e)
    html = markdown_html(view.markdown())
    assert "<code>old_text</code>" in html and "<code>a_b.py</code>" in html and "\\" not in html
    assert "*exactly*" in html  # the rest of the text stays literal: no emphasis from a tool's words
    messages: list[Message] = [
        UserMessage(text="run it"),
        AssistantMessage([ToolCall("r1", "run_cell", {"id": "abc"})]),
        ToolResultMessage("r1", "run_cell", "ran"),
    ]
    md = history_view("c", messages).md
    assert "``" not in md and "> ▸ **run_cell** ✓" in md
