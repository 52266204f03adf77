"""Text that is not valid UTF-8 never fails a run, and tool input that is not JSON is a validation
result (issue 12, points 1 and 2): the policy of `flue_nb.runtime.text`, end to end on a SQLite
file store."""

from __future__ import annotations

import json
import math
import os
import sqlite3

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import FunctionModel, ScriptedModel, reply, tool_call
from flue_nb.runtime.messages import AssistantMessage, ToolResultMessage, UserMessage
from flue_nb.runtime.text import INVALID_INPUT_KEY, clean, decode, to_json, unescape_name


def results(model):
    return [m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage)]


def stored_text(db):
    """Every JSON and text column of the store file, as one string (it must all be UTF-8)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT data FROM records").fetchall()
        subs = conn.execute("SELECT text, conversation_id FROM submissions").fetchall()
    return "\n".join([r[0] for r in rows] + [t for row in subs for t in row])


# --- the policy ---------------------------------------------------------------------------------


def test_clean_escapes_lone_surrogates_and_keeps_valid_text():
    assert clean("plain ✓ text") == "plain ✓ text"
    assert clean("bad\udcff.txt") == "bad\\xff.txt"  # a surrogate-escaped byte: \xNN
    assert clean("a\ud800b") == "a\\ud800b"  # any other lone surrogate: \uXXXX
    assert clean("\ud83d\ude00") == "😀"  # a well-formed pair is the character
    assert clean("bad\udcff.txt").encode("utf-8")


def test_escaped_file_names_come_back_to_the_bytes_they_stand_for():
    name = os.fsdecode(b"caf\xe9-\xff.csv")
    assert unescape_name(clean(name)) == name
    assert decode(b"caf\xe9") == "caf\\xe9"
    assert unescape_name("plain\\x41.txt") == "plain\\x41.txt"  # ASCII escapes are left alone


def test_to_json_always_encodes_and_refuses_nan():
    text = to_json({"k\udc80": ["x\udcff", "\ud800", "ok ✓"]})
    text.encode("utf-8")
    assert json.loads(text) == {"k\\x80": ["x\\xff", "\\ud800", "ok ✓"]}
    with pytest.raises(ValueError):
        to_json({"x": math.nan})


# --- point 1: a run never fails on text that is not UTF-8 ----------------------------------------


def test_a_file_name_that_is_not_utf8_reaches_the_prompt_escaped_and_opens_with_the_tools(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    with open(os.path.join(os.fsencode(work), b"r\xe9sum\xe9.txt"), "wb") as f:
        f.write(b"the contents\n")
    model = ScriptedModel(
        [
            reply("", tool_call("read", path="r\\xe9sum\\xe9.txt")),
            reply("", tool_call("glob", pattern="*.txt")),
            reply("done"),
        ]
    )
    db = str(tmp_path / "s.sqlite")
    s = session(make_agent(model, sandbox=flue.local(str(work))), db=db)
    assert s.prompt("what is there?") == "done"
    assert "r\\xe9sum\\xe9.txt" in model.requests[0].system
    read, glob = results(model)
    assert (read.content, read.is_error) == ("the contents", False)
    assert glob.content == "r\\xe9sum\\xe9.txt"
    assert "r\\\\xe9sum\\\\xe9.txt" in stored_text(db)  # stored as the same escape, in JSON


def test_lone_surrogates_from_the_model_and_from_tools_are_stored_escaped(tmp_path):
    @flue.tool
    def shout(word: str) -> str:
        """Echo a word with a stray surrogate, as decoded bytes can produce."""
        return word + "\udcfe!"

    model = ScriptedModel(
        [
            reply("thinking \ud800 aloud", tool_call("shout", word="hi\udcff")),
            reply("", tool_call("bash", command="printf 'caf\\xe9'")),
            reply("all \udc80 done"),
        ]
    )
    db = str(tmp_path / "s.sqlite")
    s = session(make_agent(model, sandbox=flue.local(str(tmp_path)), tools=(shout,)), db=db)
    assert s.prompt("go") == "all \\x80 done"
    shouted, bashed = results(model)
    assert shouted.content == "hi\\xff\\xfe!"
    assert bashed.content == "caf\\xe9"
    assistant = [m for m in s.history() if isinstance(m, AssistantMessage)]
    assert assistant[0].text == "thinking \\ud800 aloud"
    assert assistant[0].tool_calls[0].input == {"word": "hi\\xff"}


def test_a_conversation_id_and_a_message_with_lone_surrogates_work_and_keep_working(tmp_path):
    model = FunctionModel(lambda req: reply("got " + [m for m in req.messages if isinstance(m, UserMessage)][-1].text))
    db = str(tmp_path / "s.sqlite")
    s = session(make_agent(model), db=db, conversation="notes-\udcff")
    assert s.prompt("first \ud800") == "got first \\ud800"
    again = session(make_agent(model), db=db, conversation="notes-\udcff")
    assert again.conversation_id == "notes-\\xff"
    assert again.prompt("second") == "got second"
    assert [m.text for m in again.history() if isinstance(m, UserMessage)] == [
        "first \\ud800",
        "second",
    ]


# --- point 2: NaN, Infinity, 1e999 in tool input --------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_tool_input_is_a_validation_result_and_the_message_is_stored(tmp_path, bad):
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    model = ScriptedModel([reply("", tool_call("read", path="a.txt", offset=bad)), reply("ok")])
    db = str(tmp_path / "s.sqlite")
    s = session(make_agent(model, sandbox=flue.local(str(tmp_path))), db=db)
    assert s.prompt("read it") == "ok"
    (result,) = results(model)
    assert result.is_error and "Invalid input for tool `read`" in result.content
    assert "NaN, Infinity" in result.content
    call = [m for m in s.history() if isinstance(m, AssistantMessage)][0].tool_calls[0]
    assert set(call.input) == {INVALID_INPUT_KEY}  # stored, as text JSON can carry
    assert s.submissions()[0].outcome.value == "completed"
