"""The one event fold: typed parts, order-proof states, and its two renderers agreeing."""

from __future__ import annotations

from flue_nb.notebook.chat._fold import ChatFold
from flue_nb.notebook.view.cards import card_for, register_card
from flue_nb.notebook.view.fold import Fold
from flue_nb.notebook.view.parts import ToolPart
from flue_nb.notebook.view.transcript import CellView
from flue_nb.runtime import events as ev
from flue_nb.runtime.messages import ImagePart


def test_a_late_queued_event_never_brings_a_settled_submission_back() -> None:
    fold = ChatFold()
    fold.apply(ev.SubmissionSettled(submission_id="s1", outcome="aborted"))
    fold.apply(ev.SubmissionQueued(submission_id="s1", text="hi", accepted_at=1.0))
    fold.apply(ev.SubmissionRunning(submission_id="s1", attempt=1, agent="a"))
    assert fold.live() == []
    [block] = fold.history()
    assert (block["state"], block["outcome"], block["text"]) == ("settled", "aborted", "hi")


def test_a_late_queued_event_never_brings_a_running_submission_back() -> None:
    fold = Fold()
    fold.apply(ev.SubmissionRunning(submission_id="s1", attempt=1, agent="a"))
    fold.apply(ev.SubmissionQueued(submission_id="s1", text="hi", accepted_at=1.0))
    assert fold.blocks["s1"].state == "running"


def test_a_tool_card_sums_the_call_up_by_its_summary_arg_and_shows_code_as_code() -> None:
    fold = ChatFold()
    code = "import math\nx = math.pi\nprint(x)"
    fold.apply(ev.ToolStart(submission_id="s", call_id="c", name="python", input={"code": code}))
    [tool] = fold.live()[0]["parts"]
    assert tool["kind"] == "tool" and tool["summary"] == "import math…"
    assert tool["code"] == [
        {"arg": "code", "lang": "python", "value": {"text": code, "bytes": len(code), "lines": 3, "clipped": False}}
    ]
    assert tool["input"]["text"] == ""  # nothing else to show as JSON


def test_write_content_is_code_in_the_language_of_its_path() -> None:
    fold = ChatFold()
    fold.apply(
        ev.ToolStart(submission_id="s", call_id="c", name="write", input={"path": "a/b.py", "content": "x = 1\n"})
    )
    [tool] = fold.live()[0]["parts"]
    assert tool["code"][0]["lang"] == "py" and tool["summary"] == "a/b.py"
    assert '"path": "a/b.py"' in tool["input"]["text"]


def test_a_denied_call_is_drawn_as_denied_not_as_an_error() -> None:
    fold = Fold()
    fold.apply(ev.ToolStart(submission_id="s", call_id="c", name="bash", input={"command": "rm -rf /"}))
    details = {"approval": {"approved": False, "reason": "policy"}}
    fold.apply(
        ev.ToolEnd(submission_id="s", call_id="c", name="bash", is_error=True, content="Not run", details=details)
    )
    tool = fold.tool("c")
    assert (
        tool is not None
        and tool.status == "denied"
        and tool.approval == {"approved": False, "reason": "policy", "fallback": None, "via": None}
    )


def test_figures_are_kept_by_digest_for_the_card() -> None:
    fold = Fold()
    image = ImagePart("image/png", "ab" * 32, 10, 8, "figure 1", data=b"\x89PNG")
    fold.apply(ev.ToolStart(submission_id="s", call_id="c", name="python", input={"code": "plot()"}))
    fold.apply(ev.ToolEnd(submission_id="s", call_id="c", name="python", is_error=False, content="", images=(image,)))
    tool = fold.tool("c")
    assert isinstance(tool, ToolPart) and [i.label for i in tool.images] == ["figure 1"]
    assert fold.images == {"ab" * 32: b"\x89PNG"}


def test_the_namespace_diff_keeps_the_tools_names() -> None:
    fold = Fold()
    fold.apply(ev.ToolStart(submission_id="s", call_id="c", name="python", input={"code": "x = 1"}))
    details = {"variables": {"created": ["x"], "changed": {"y": "int"}, "deleted": ["z"]}}
    fold.apply(ev.ToolEnd(submission_id="s", call_id="c", name="python", is_error=False, content="", details=details))
    tool = fold.tool("c")
    assert tool is not None and tool.namespace is not None
    assert (tool.namespace.added, tool.namespace.changed, tool.namespace.removed) == (["x"], ["y"], ["z"])


def test_the_transcript_and_the_widget_read_the_same_fold() -> None:
    events: list[ev.Event] = [
        ev.SubmissionRunning(submission_id="s1", attempt=1, agent="a"),
        ev.TextDelta(submission_id="s1", delta="Let me look."),
        ev.ToolStart(submission_id="s1", call_id="c", name="bash", input={"command": "ls"}),
        ev.ToolEnd(submission_id="s1", call_id="c", name="bash", is_error=False, content="a.txt"),
        ev.SubmissionSettled(submission_id="s1", outcome="completed", result="done"),
    ]
    view, chat = CellView("look", "c1", submission_id="s1"), ChatFold()
    for e in events:
        view.apply(e)
        chat.apply(e)
    [block] = chat.history()
    assert [p["kind"] for p in block["parts"]] == ["text", "tool"]
    assert view.text_plain().split("\n") == ["Let me look.", "· bash: ls ✓ → a.txt", "[✓ completed]"]


def test_a_tool_registers_its_card_in_one_line() -> None:
    register_card("run_cell_example", code={"source": "python"}, result="list")
    card = card_for("run_cell_example")
    assert card.code == {"source": "python"} and card.result == "list"
    fold = ChatFold()
    fold.apply(
        ev.ToolStart(submission_id="s", call_id="c", name="run_cell_example", input={"source": "1 + 1", "index": 3})
    )
    fold.apply(ev.ToolEnd(submission_id="s", call_id="c", name="run_cell_example", is_error=False, content="2"))
    [tool] = fold.live()[0]["parts"]
    assert tool["code"][0]["arg"] == "source" and tool["result_kind"] == "list"
    assert tool["summary"] == "1 + 1"


def test_the_notebook_tools_cards_show_a_cells_source_as_code_and_cells_as_a_list() -> None:
    fold = ChatFold()
    fold.apply(
        ev.ToolStart(submission_id="s", call_id="c1", name="edit_cell", input={"id": "ab12", "source": "x = 1\n"})
    )
    fold.apply(ev.ToolEnd(submission_id="s", call_id="c1", name="edit_cell", is_error=False, content="edited"))
    fold.apply(ev.ToolStart(submission_id="s", call_id="c2", name="cells", input={}))
    fold.apply(ev.ToolEnd(submission_id="s", call_id="c2", name="cells", is_error=False, content="#1 ok\n#2 raised"))
    edit, listing = fold.live()[0]["parts"]
    [code] = edit["code"]
    assert (code["arg"], code["lang"], code["value"]["text"]) == ("source", "python", "x = 1\n")
    assert listing["result_kind"] == "list"
