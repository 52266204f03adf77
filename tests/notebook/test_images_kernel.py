"""Images in a real kernel (issue 14): the agent's figures show in the person's cell and reach the
model; `%%flue --attach` sends the person's figures and image files."""

from __future__ import annotations

import pytest
from kernel_helpers import Kernel

pytest.importorskip("matplotlib")
pytest.importorskip("PIL")

pytestmark = pytest.mark.kernel

SETUP = """
import matplotlib.pyplot as plt
from flue_nb.models import FunctionModel, ScriptedModel, reply, tool_call

def looker(req):
    if req.images:
        img = req.images[-1]
        return reply(f"saw {img.label} {img.width}x{img.height} {img.media_type}")
    return reply("", tool_call("python", code="plt.plot([1, 4, 2]); plt.title('t'); plt.show()"))

looks = FunctionModel(looker)
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    cwd = tmp_path_factory.mktemp("work")
    k = Kernel(root, cwd)
    k.ok(SETUP)
    k.ok("%config FlueMagics.db = 'flue.sqlite'")
    yield k
    k.shutdown()


def test_a_figure_the_agent_draws_shows_in_the_cell_and_reaches_the_model(kernel):
    run = kernel.ok("%flue -c plot --no-widget -m looks plot it")
    pngs = [d for d in run.displays.values() if "image/png" in d["data"]]
    assert len(pngs) == 1, run.all_text()  # shown once, by flue (the inline backend did not too)
    assert "saw figure 1" in run.text() and "image/png" in run.text()
    assert kernel.ok("print(plt.get_fignums())").stdout.strip() == "[]"  # closed once captured


def test_attach_sends_a_figure_from_the_namespace_and_an_image_file(kernel):
    kernel.ok("fig, ax = plt.subplots(figsize=(4, 3), dpi=50); ax.plot([1, 2]);\nfig.savefig('saved.png')")
    run = kernel.ok("%%flue -c attach --no-widget -m looks --attach fig,saved.png\nwhat is this?")
    assert "saw saved.png 200x150 image/png" in run.text(), run.all_text()
    labels = kernel.ok("print([p.label for p in looks.requests[-1].messages[-1].images])").stdout
    assert labels.strip() == "['fig', 'saved.png']"
    history = kernel.ok("%flue -c attach history")
    assert "[saved.png: 200×150 PNG]" in history.text() and "data:image/png;base64," in history.text("text/markdown")


def test_attach_of_an_unknown_name_is_a_usage_error(kernel):
    run = kernel.run("%%flue -c attach --no-widget -m looks --attach nothing_here\nlook")
    assert "UsageError" in run.stderr and "neither a variable nor an image file" in run.stderr
    assert not run.displays  # nothing was sent


SVG_SETUP = r"""
SVG_CODE = (
    "from IPython.display import SVG, display\n"
    "display(SVG('<svg width=\"40000\" height=\"20000\">"
    "<rect width=\"40000\" height=\"20000\" fill=\"teal\"/></svg>'))"
)

def svg_looker(req):
    if req.images:
        img = req.images[-1]
        return reply(f"saw {img.label} {img.width}x{img.height} {img.media_type}")
    return reply("", tool_call("python", code=SVG_CODE))

svg_looks = FunctionModel(svg_looker)
"""


def test_display_of_an_svg_in_the_python_tool_reaches_the_model_scaled_before_drawing(kernel):
    pytest.importorskip("cairosvg")
    kernel.ok(SVG_SETUP)
    run = kernel.ok("%flue -c svg --no-widget -m svg_looks draw it")
    # Declared 40000x20000: drawn at 1568 px on the long edge, never at its full size.
    assert "saw display 1 1568x784 image/png" in run.text(), run.all_text()


def test_a_text_cells_figure_shows_under_it_when_a_chat_shows_the_conversation_too(kernel):
    kernel.ok("%flue chat -c plot2 -m looks")  # a live chat draws the same submissions' cards
    run = kernel.ok("%flue -c plot2 --no-widget -m looks plot it")
    pngs = [d for d in run.displays.values() if "image/png" in d["data"]]
    assert len(pngs) == 1, run.all_text()  # the transcript only names it: the cell shows it


FRESH_SETUP = """
from flue_nb.models import ScriptedModel, reply, tool_call
first_plot = ScriptedModel([
    reply("", tool_call("python", code="import matplotlib.pyplot as plt\\nplt.plot([1, 3, 2])\\nplt.show()")),
    reply("drawn"),
])
"""


def test_the_first_cell_that_imports_matplotlib_shows_its_figure_once(tmp_path_factory):
    # Issue 33.4: in a fresh kernel pyplot is imported by the agent's code itself, after the capture
    # began; its `plt.show()` (the inline backend's) must not add an image output beside the view's.
    k = Kernel(tmp_path_factory.mktemp("jupyter"), tmp_path_factory.mktemp("work"))
    try:
        k.ok(FRESH_SETUP)
        k.ok("%config FlueMagics.widget = 'always'")
        run = k.ok("%flue -c fresh -m first_plot plot it")
        outputs = [d for d in run.displays.values()]
        pngs = [d for d in outputs if "image/png" in d["data"]]
        assert pngs == [], run.all_text()  # the view draws it in the call's card: not a second image
        assert "drawn" in run.all_text() and "figure 1" in run.all_text()
        assert k.ok("import matplotlib.pyplot as plt; print(plt.get_fignums())").stdout.strip() == "[]"
    finally:
        k.shutdown()
