"""The one event fold: typed parts, order-proof states, and its two renderers agreeing."""

from __future__ import annotations

from flue_nb.notebook.views.cards import card_for, register_card
from flue_nb.notebook.views.chat._fold import ChatFold
from flue_nb.notebook.views.fold import Fold
from flue_nb.notebook.views.parts import ToolPart
from flue_nb.notebook.views.transcript import CellView
from flue_nb.runtime import events as ev
from flue_nb.runtime.facts import ApprovalFacts, NamespaceDiff
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
    facts = ApprovalFacts("policy", False, "deny")
    fold.apply(
        ev.ToolEnd(submission_id="s", call_id="c", name="bash", is_error=True, content="Not run", approval=facts)
    )
    tool = fold.tool("c")
    assert tool is not None and tool.status == "denied" and tool.approval == ApprovalFacts("policy", False, "deny")


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
    diff = NamespaceDiff(("x",), ("y",), ("z",))
    fold.apply(ev.ToolEnd(submission_id="s", call_id="c", name="python", is_error=False, content="", namespace=diff))
    tool = fold.tool("c")
    assert tool is not None and tool.namespace == diff


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


def test_a_card_sums_a_call_up_as_the_agents_tool_says() -> None:
    # The fold learns each tool's `summary_arg` from the agent's tools it is given (a session's
    # `summaries`); a stored call of a tool the agent lacks is summed up by its first text argument.
    from pydantic import BaseModel

    from flue_nb.runtime.tools.summary import Summaries
    from flue_nb.runtime.tools.tool import define_tool

    class In(BaseModel):
        table: str
        query: str

    lookup = define_tool("lookup", "d", input=In, run=lambda a: "", summary_arg="query")
    start = ev.ToolStart(submission_id="s", call_id="c", name="lookup", input={"table": "sales", "query": "x > 1"})
    told, untold = ChatFold(summaries=Summaries([lookup])), ChatFold()
    told.apply(start)
    untold.apply(start)
    assert told.live()[0]["parts"][0]["summary"] == "x > 1"
    assert untold.live()[0]["parts"][0]["summary"] == "sales"


def test_a_call_id_used_again_in_a_later_submission_gets_its_own_card() -> None:
    # Issue 33.3: after a kernel restart the offline model starts at `call_1` again; a chat that
    # redrew the old turn from the store must still draw the new turn's cards, and keep the old
    # ones as they were.
    fold = ChatFold()
    for e in [
        ev.ToolStart(submission_id="s1", call_id="call_1", name="bash", input={"command": "old"}),
        ev.ToolEnd(submission_id="s1", call_id="call_1", name="bash", is_error=False, content="o", duration_ms=5),
        ev.SubmissionSettled(submission_id="s1", outcome="completed"),
        ev.SubmissionRunning(submission_id="s2", attempt=1, agent="a"),
        ev.ToolStart(submission_id="s2", call_id="call_1", name="bash", input={"command": "new"}),
        ev.ToolStart(submission_id="s2", call_id="call_1", name="bash", input={"command": "new"}),  # live, again
        ev.ToolEnd(submission_id="s2", call_id="call_1", name="bash", is_error=True, content="n", duration_ms=900),
    ]:
        fold.apply(e)
    [old] = fold.history()[0]["parts"]
    [new] = fold.live()[0]["parts"]
    assert (old["summary"], old["status"], old["duration_ms"]) == ("old", "ok", 5)
    assert (new["summary"], new["status"], new["duration_ms"]) == ("new", "error", 900)
    assert fold.tool("call_1") is fold.tool("call_1", "s2") and fold.tool("call_1", "s1") is not None
    assert fold.tool("call_1", "s1").summary == "old"  # type: ignore[union-attr]


def test_a_subagents_call_with_its_parents_call_id_is_a_card_of_its_own() -> None:
    fold = Fold()
    for e in [
        ev.ToolStart(submission_id="s", call_id="call_1", name="task", input={"description": "check"}),
        ev.TaskStart(submission_id="s", task_id="call_1", agent="kid", description="check"),
        ev.ToolStart(submission_id="s", task_id="call_1", call_id="call_1", name="bash", input={"command": "ls"}),
        ev.ToolEnd(submission_id="s", task_id="call_1", call_id="call_1", name="bash", is_error=False, content="a"),
        ev.TaskEnd(submission_id="s", task_id="call_1", agent="kid", text="fine"),
        ev.ToolEnd(submission_id="s", call_id="call_1", name="task", is_error=False, content="fine"),
    ]:
        fold.apply(e)
    [task] = fold.blocks["s"].parts
    assert isinstance(task, ToolPart) and task.name == "task" and task.status == "ok"
    assert task.task is not None and task.task.status == "ok"
    [inner] = task.task.parts
    assert isinstance(inner, ToolPart) and inner.name == "bash" and inner.result == "a"


def test_a_cell_that_joined_a_recovered_run_shows_its_answer_once() -> None:
    # Issue 33.6: the recovered run this cell's message joined streams the answer into the cell;
    # the store's word on that run (read again when the cell finishes) must not add it a second time.
    view = CellView("hi", "c", submission_id="s2")
    view.recovery("s1")  # left by an earlier kernel, seen when the cell opened the conversation
    for e in [
        ev.SubmissionRecovery(submission_id="s1", attempts=1),
        ev.MessageEnd(role="user", submission_id="s1", from_submission_id="s2", text="hi"),
        ev.TextDelta(submission_id="s1", delta="The answer."),
        ev.MessageEnd(role="assistant", submission_id="s1", text="The answer."),
        ev.SubmissionSettled(submission_id="s1", outcome="completed", result="The answer.", recovered=True),
        ev.SubmissionSettled(submission_id="s2", outcome="completed", result="The answer.", joined_into="s1"),
    ]:
        view.apply(e)
    view.recovery("s1", "completed", result="The answer.")
    assert view.text_plain().count("The answer.") == 1
    assert "↻ recovered submission s1: settled completed" in view.text_plain()


def test_a_call_stopped_while_it_waited_for_approval_reads_the_same_live_and_redrawn() -> None:
    # Issue 33.6: live the call ends "aborted"; redrawn, the store holds the result the runtime
    # closed it with (an error text, no duration): the card must still say "aborted".
    start = ev.ToolStart(submission_id="s", call_id="c", name="bash", input={"command": "ls"})
    settled = ev.SubmissionSettled(submission_id="s", outcome="aborted")
    live, redrawn = Fold(), Fold()
    live.apply(start)
    live.mark_tool("c", status="awaiting_approval", ask="bash: ls")
    live.apply(ev.ToolEnd(submission_id="s", call_id="c", name="bash", is_error=True, content="(aborted)",
                          ended="aborted", duration_ms=12))  # fmt: skip
    live.apply(settled)
    stored = "Aborted by the user before this tool call finished."
    for e in [start, ev.ToolEnd(submission_id="s", call_id="c", name="bash", is_error=True, content=stored), settled]:
        redrawn.apply(e)
    assert live.tool("c").status == redrawn.tool("c").status == "aborted"  # type: ignore[union-attr]


def test_a_card_shows_notebook_text_without_the_envelope_the_model_reads() -> None:
    from flue_nb.notebook.kernel._envelope import fence

    fold = Fold()
    fold.apply(ev.ToolStart(submission_id="s", call_id="c", name="edit_cell", input={"id": "c2"}))
    said = f"Not written: cell c2 changed since you read it; its current source:\n{fence('y = 2  # mine')}\nRead it."
    fold.apply(ev.ToolEnd(submission_id="s", call_id="c", name="edit_cell", is_error=True, content=said))
    card = fold.tool("c")
    assert (
        card is not None
        and card.result
        == "Not written: cell c2 changed since you read it; its current source:\ny = 2  # mine\nRead it."
    )
