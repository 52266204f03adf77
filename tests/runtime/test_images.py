"""Images (issue 14): figures in tool results, `read` of images, attachments, compaction, storage,
offline models and cassettes."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

PIL = pytest.importorskip("PIL")
pytest.importorskip("matplotlib")
from agents import make_agent, session
from PIL import Image

import flue_nb as flue
from flue_nb.models import (
    FunctionModel,
    RecordingModel,
    ReplayModel,
    ScriptedModel,
    reply,
    tool_call,
)
from flue_nb.runtime.core.compaction import summary_request
from flue_nb.runtime.core.tokens import TokenCounter
from flue_nb.runtime.core.window import load_window
from flue_nb.runtime.errors import CassetteDriftError, ConfigError
from flue_nb.runtime.images import (
    MAX_BYTES,
    MAX_EDGE,
    MAX_IMAGES_PER_RESULT,
    cap_images,
    image_from_bytes,
    image_from_object,
    image_tokens,
    sniff,
)
from flue_nb.runtime.messages import (
    ToolResultMessage,
    UserMessage,
    message_from_dict,
    message_to_dict,
)
from flue_nb.runtime.providers.anthropic import to_wire_messages
from flue_nb.runtime.store.sqlite import SQLiteStore


def png(width: int = 64, height: int = 48, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


PLOT = "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('{title}')"


# --- images.py -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, mime", [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"), ("WEBP", "image/webp")]
)
def test_sniff_reads_type_and_size_of_the_four_formats(fmt: str, mime: str) -> None:
    buf = io.BytesIO()
    Image.new("RGB", (300, 200)).save(buf, format=fmt)
    assert sniff(buf.getvalue()) == (mime, 300, 200)
    assert sniff(b"%PDF-1.7 not an image") is None


def test_large_images_are_scaled_to_the_long_edge_and_the_byte_cap() -> None:
    wide = image_from_bytes(png(4000, 1000), label="wide")
    assert (wide.width, wide.height) == (MAX_EDGE, 392)
    assert sniff(wide.data or b"")[1:] == (MAX_EDGE, 392)  # type: ignore[index]
    import random

    noise = Image.frombytes("RGB", (1200, 1200), random.Random(0).randbytes(1200 * 1200 * 3))
    buf = io.BytesIO()
    noise.save(buf, format="PNG")
    assert len(buf.getvalue()) > MAX_BYTES
    part = image_from_bytes(buf.getvalue())
    assert len(part.data or b"") <= MAX_BYTES and max(part.width, part.height) <= MAX_EDGE


def test_an_image_costs_about_width_times_height_over_750_tokens() -> None:
    part = image_from_bytes(png(750, 100))
    assert image_tokens(part) == 100
    counter = TokenCounter(count_text=lambda text: 0)
    with_image = counter.count_message(UserMessage("look", images=[part]))
    without = counter.count_message(UserMessage("look"))
    assert with_image - without == 100


def test_too_many_images_keep_the_first_ones_and_say_what_was_left_out() -> None:
    parts = [image_from_bytes(png(10 + i, 10), label=f"figure {i + 1}") for i in range(6)]
    content, kept = cap_images("out", parts)
    assert kept == parts[:MAX_IMAGES_PER_RESULT]
    assert "2 more image(s) not shown (figure 5, figure 6)" in content


def test_not_an_image_is_a_config_error_naming_what_to_attach() -> None:
    with pytest.raises(ConfigError, match="not an image"):
        image_from_object(object())
    with pytest.raises(ConfigError, match="no image file"):
        image_from_object("missing.png")


# --- messages, provider, compaction ------------------------------------------------------------


def test_the_json_form_keeps_the_digest_never_the_bytes() -> None:
    part = image_from_bytes(png(), label="plot")
    msg = ToolResultMessage("c1", "python", "drew it", images=[part])
    d = message_to_dict(msg)
    text = json.dumps(d)  # always JSON-encodable
    assert part.digest in text and "data" not in d["images"][0]
    back = message_from_dict(d)
    assert isinstance(back, ToolResultMessage)
    assert back.images[0].digest == part.digest and back.images[0].data is None
    assert (back.images[0].width, back.images[0].height, back.images[0].label) == (64, 48, "plot")


def test_anthropic_gets_image_blocks_inside_tool_results_and_user_content() -> None:
    import base64

    part = image_from_bytes(png())
    wire = to_wire_messages(
        [
            UserMessage("what is this?", images=[part]),
            _assistant(),
            ToolResultMessage("t1", "python", "drew it", images=[part]),
        ]
    )
    user = wire[0]["content"]
    assert user[0]["text"] == "what is this?"
    assert user[1]["type"] == "image" and user[1]["source"]["media_type"] == "image/png"
    assert base64.b64decode(user[1]["source"]["data"]) == part.data
    result = wire[2]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"][0] == {"type": "text", "text": "drew it"}
    assert result["content"][1]["type"] == "image"


def _assistant():  # type: ignore[no-untyped-def]
    from flue_nb.runtime.messages import AssistantMessage, ToolCall

    return AssistantMessage([ToolCall("t1", "python", {"code": "plt.plot()"})])


def test_compaction_folds_images_to_one_line_and_never_sends_bytes() -> None:
    part = image_from_bytes(png(), label="figure 1")
    folded = [
        UserMessage("plot it", images=[part]),
        _assistant(),
        ToolResultMessage("t1", "python", "ok", images=[part]),
    ]
    request = summary_request(folded)
    assert request.images == []
    text = request.messages[0].text  # type: ignore[union-attr]
    assert text.count("[image: figure 1, 64×48 PNG") == 2


# --- the python tool, the store, offline models ------------------------------------------------


def plot_then_look(seen: list) -> FunctionModel:
    """Plots in the first turn; in the second, looks at the figure it was sent."""

    def fn(request):  # type: ignore[no-untyped-def]
        if len(fn.calls) == 0:
            fn.calls.append(1)
            return reply("Plotting.", tool_call("python", code=PLOT.format(title="first")))
        seen.extend(request.images)
        img = request.images[-1]
        return reply(f"I see a {img.width}x{img.height} {img.media_type} figure.")

    fn.calls = []  # type: ignore[attr-defined]
    return FunctionModel(fn)


def test_a_figure_drawn_by_python_reaches_the_model_as_an_image_and_is_stored_once(tmp_path: Path) -> None:
    seen: list = []
    db = tmp_path / "f.sqlite"
    s = session(make_agent(plot_then_look(seen), sandbox=flue.kernel(tmp_path, namespace={})), db=str(db))
    answer = s.prompt("plot something")
    assert len(seen) == 1
    fig = seen[0]
    assert fig.media_type == "image/png" and fig.data is not None and fig.label == "figure 1"
    assert answer == f"I see a {fig.width}x{fig.height} image/png figure."
    result = next(m for m in s.history() if isinstance(m, ToolResultMessage))
    assert "1 image(s) drawn: figure 1" in result.content
    assert s.store.blob(fig.digest) == fig.data
    # A new kernel rebuilds the window with the bytes, from the blob table.
    with SQLiteStore(db) as store:
        t, _, _ = load_window(store, s.conversation_id)
    again = [p for m in t.messages if isinstance(m, ToolResultMessage) for p in m.images]
    assert again[0].data == fig.data


def test_the_same_figure_twice_is_one_blob(tmp_path: Path) -> None:
    db = tmp_path / "f.sqlite"
    code = PLOT.format(title="same")
    model = ScriptedModel(
        [reply("", tool_call("python", code=code)), reply("", tool_call("python", code=code)), reply("done")]
    )
    s = session(make_agent(model, sandbox=flue.kernel(tmp_path, namespace={})), db=str(db))
    s.prompt("plot twice")
    digests = [p.digest for p in model.requests[-1].images]
    assert len(digests) == 2 and digests[0] == digests[1]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(DISTINCT digest), count(*) FROM blobs").fetchone() == (1, 1)


def test_more_figures_than_the_cap_are_named_in_a_note(tmp_path: Path) -> None:
    code = "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nfor i in range(6):\n    plt.figure(); plt.plot([i, i + 1])"
    model = ScriptedModel([reply("", tool_call("python", code=code)), reply("ok")])
    session(make_agent(model, sandbox=flue.kernel(tmp_path, namespace={}))).prompt("six plots")
    result = model.requests[-1].messages[-1]
    assert isinstance(result, ToolResultMessage)
    assert len(result.images) == MAX_IMAGES_PER_RESULT
    assert "2 more image(s) not shown" in result.content


def test_rich_values_and_display_images_become_images(tmp_path: Path) -> None:
    (tmp_path / "pic.png").write_bytes(png(30, 20))
    code = f"from IPython.display import Image\nImage(filename={str(tmp_path / 'pic.png')!r})"
    svg = 'class Vector:\n    def _repr_svg_(self):\n        return \'<svg width="4" height="4"/>\'\nVector()'
    model = ScriptedModel(
        [reply("", tool_call("python", code=code)), reply("", tool_call("python", code=svg)), reply("ok")]
    )
    session(make_agent(model, sandbox=flue.kernel(tmp_path, namespace={}))).prompt("show")
    first = model.requests[1].messages[-1]
    assert isinstance(first, ToolResultMessage) and (first.images[0].width, first.images[0].height) == (30, 20)
    second = model.requests[2].messages[-1]  # an SVG repr, rasterised (cairosvg, in the images extra)
    assert isinstance(second, ToolResultMessage) and len(second.images) == 1
    assert second.images[0].media_type == "image/png" and (second.images[0].width, second.images[0].height) == (4, 4)


def test_an_svg_that_cannot_be_converted_is_a_note_not_a_failure(tmp_path: Path) -> None:
    bad = "class Broken:\n    def _repr_svg_(self):\n        return '<svg this is not xml'\nBroken()"
    model = ScriptedModel([reply("", tool_call("python", code=bad)), reply("ok")])
    session(make_agent(model, sandbox=flue.kernel(tmp_path, namespace={}))).prompt("show")
    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolResultMessage) and result.images == [] and not result.is_error
    assert "SVG" in result.content and "Not sent" in result.content


def test_read_returns_an_image_with_its_size_and_other_binaries_are_still_refused(tmp_path: Path) -> None:
    (tmp_path / "chart.png").write_bytes(png(120, 80))
    (tmp_path / "disguised.dat").write_bytes(png(10, 10))
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01binary")
    model = ScriptedModel(
        [
            reply(
                "",
                tool_call("read", path="chart.png"),
                tool_call("read", path="disguised.dat"),
                tool_call("read", path="blob.bin"),
            ),
            reply("ok"),
        ]
    )
    session(make_agent(model, sandbox=flue.local(str(tmp_path)))).prompt("look")
    chart, disguised, blob = model.requests[-1].messages[-3:]
    assert isinstance(chart, ToolResultMessage) and not chart.is_error
    assert "120×80 PNG" in chart.content and (chart.images[0].width, chart.images[0].height) == (120, 80)
    assert isinstance(disguised, ToolResultMessage) and len(disguised.images) == 1
    assert isinstance(blob, ToolResultMessage) and blob.is_error and "binary" in blob.content and not blob.images


def test_attached_images_are_stored_with_the_submission_and_survive_a_restart(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3])
    db = tmp_path / "a.sqlite"
    model = ScriptedModel([reply("A line going up.")])
    s = session(make_agent(model), db=str(db))
    s.prompt("what does this show?", images=[fig, png(20, 10)])
    plt.close(fig)
    user = model.requests[0].messages[0]
    assert isinstance(user, UserMessage) and [p.label for p in user.images] == ["Figure", ""]
    assert all(p.data for p in user.images) and model.requests[0].images == user.images
    with SQLiteStore(db) as store:  # a new kernel
        t, _, _ = load_window(store, s.conversation_id)
    kept = t.messages[0]
    assert isinstance(kept, UserMessage) and [p.data for p in kept.images] == [p.data for p in user.images]


def test_cassettes_keep_images_by_digest_and_a_different_attachment_is_drift(tmp_path: Path) -> None:
    cassette = tmp_path / "c.json"
    live = RecordingModel(ScriptedModel([reply("red")]), cassette)
    session(make_agent(live)).prompt("colour?", images=[png(color=(255, 0, 0))])
    turn = json.loads(cassette.read_text())["turns"][0]
    digest = image_from_bytes(png(color=(255, 0, 0))).digest
    assert turn["images"][digest]["width"] == 64 and "data" not in turn["images"][digest]
    assert turn["request"]["messages"][0] == ["user", "colour?", [digest]]
    replay = ReplayModel(cassette)
    assert session(make_agent(replay)).prompt("colour?", images=[png(color=(255, 0, 0))]) == "red"
    assert replay.requests[0].images[0].digest == digest
    with pytest.raises(CassetteDriftError, match="message 1 differs"):
        session(make_agent(ReplayModel(cassette))).prompt("colour?", images=[png(color=(0, 0, 255))])


def test_compacting_a_conversation_with_figures_sends_the_summariser_descriptions_not_bytes(tmp_path: Path) -> None:
    code = PLOT.format(title="folded")
    model = ScriptedModel(
        [
            reply("", tool_call("python", code=code)),
            reply("Drew it."),
            reply("", tool_call("python", code=code)),
            reply("Again."),
        ],
        summary="The user asked for plots; two were drawn.",
    )
    sandbox = flue.kernel(tmp_path, namespace={})

    @flue.agent
    def folding() -> str:
        flue.use_model(model, compaction=flue.CompactionConfig(keep_recent_tokens=10))
        flue.use_sandbox(sandbox)
        return "You plot."

    s = session(folding)
    s.prompt("plot")
    s.prompt("plot again")
    s.compact()
    summariser = [r for r in model.requests if r.purpose == "compaction"]
    assert len(summariser) == 1 and summariser[0].images == []
    text = summariser[0].messages[0].text  # type: ignore[union-attr]
    assert "[image: figure 1" in text and "base64" not in text and "\x89PNG" not in text


def test_without_pillow_small_images_pass_and_large_ones_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    small, large = png(20, 10), png(2000, 100)
    monkeypatch.setitem(sys.modules, "PIL", None)  # `import PIL` now raises ImportError
    assert image_from_bytes(small).width == 20
    with pytest.raises(ConfigError, match=r"flue_nb\[images\]"):
        image_from_bytes(large)


def test_an_image_whose_bytes_are_gone_is_described_to_the_model() -> None:
    part = image_from_bytes(png(), label="lost")
    part.data = None
    block = to_wire_messages([UserMessage("see", images=[part])])[0]["content"][1]
    assert block["type"] == "text" and "[image: lost, 64×48 PNG" in block["text"]


def test_tool_end_events_carry_the_images_live_and_rebuilt_from_the_store(tmp_path: Path) -> None:
    from flue_nb.runtime.events import ToolEnd

    model = ScriptedModel([reply("", tool_call("python", code=PLOT.format(title="seen"))), reply("ok")])
    s = session(make_agent(model, sandbox=flue.kernel(tmp_path, namespace={})))
    live: list = []
    s.observe(lambda e: live.append(e) if isinstance(e, ToolEnd) else None)
    s.prompt("plot")
    [end] = live
    assert end.images and end.images[0].data is not None
    [rebuilt] = [e for e in s.events() if isinstance(e, ToolEnd)]
    assert [p.digest for p in rebuilt.images] == [p.digest for p in end.images]
