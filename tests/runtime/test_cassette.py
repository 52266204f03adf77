"""Record a session's model turns to a cassette, replay them offline, fail on drift."""

from __future__ import annotations

import json

import pytest
from agents import make_agent, session

import flue_nb as flue
from flue_nb.models import CassetteDriftError, RecordingModel, ReplayModel, ScriptedModel, fail, reply, tool_call


def live_session(tmp_path, cassette):
    (tmp_path / "a.txt").write_text("alpha\n")
    live = ScriptedModel(
        [
            reply("Reading.", tool_call("read", path="a.txt")),
            reply("It says alpha."),
            fail("bad_request", "no such thing"),
        ]
    )
    recording = RecordingModel(live, cassette)
    s = session(make_agent(recording, sandbox=flue.local(str(tmp_path))))
    assert s.prompt("what is in a.txt?") == "It says alpha."
    with pytest.raises(flue.ProviderError, match="no such thing"):
        s.prompt("and now?")
    return live


def test_a_recorded_session_replays_offline_with_the_same_answers(tmp_path):
    cassette = tmp_path / "session.cassette.json"
    live = live_session(tmp_path, cassette)
    data = json.loads(cassette.read_text())
    assert len(data["turns"]) == 3 and data["turns"][2]["error"]["type"] == "provider_error"
    replay = ReplayModel(cassette)
    s = session(make_agent(replay, sandbox=flue.local(str(tmp_path))))
    assert s.prompt("what is in a.txt?") == "It says alpha."
    with pytest.raises(flue.ProviderError, match="no such thing"):
        s.prompt("and now?")
    replay.assert_complete()
    assert replay.requests[1].messages[1:] == live.requests[1].messages[1:]  # all but the user message's id


def test_a_changed_prompt_is_drift(tmp_path):
    cassette = tmp_path / "c.json"
    live_session(tmp_path, cassette)
    s = session(make_agent(ReplayModel(cassette), sandbox=flue.local(str(tmp_path))))
    with pytest.raises(CassetteDriftError, match="message 1 differs") as exc_info:
        s.prompt("what is in b.txt?")
    assert exc_info.value.type == "cassette_drift"


def test_changed_instructions_are_drift(tmp_path):
    cassette = tmp_path / "c.json"
    live_session(tmp_path, cassette)
    agent = make_agent(ReplayModel(cassette), sandbox=flue.local(str(tmp_path)), instructions="Different.")
    with pytest.raises(CassetteDriftError, match="`system` differs"):
        session(agent).prompt("what is in a.txt?")


def test_asking_past_the_recording_is_drift(tmp_path):
    cassette = tmp_path / "c.json"
    RecordingModel(ScriptedModel([]), cassette)
    with pytest.raises(CassetteDriftError, match="not recorded"):
        session(make_agent(ReplayModel(cassette))).prompt("hello")


def test_a_missing_cassette_says_how_to_make_one(tmp_path):
    with pytest.raises(flue.ConfigError, match="RecordingModel"):
        ReplayModel(tmp_path / "nope.json")


def test_a_cassette_recorded_in_one_directory_replays_in_another(tmp_path, monkeypatch):
    recorded, replayed = tmp_path / "checkout-a", tmp_path / "elsewhere" / "checkout-b"
    for d in (recorded, replayed):
        d.mkdir(parents=True)
        (d / "a.txt").write_text("alpha\n")
    cassette = tmp_path / "c.json"
    monkeypatch.chdir(recorded)
    live = ScriptedModel([reply("Reading.", tool_call("read", path="a.txt")), reply("It says alpha.")])
    agent = make_agent(RecordingModel(live, cassette), sandbox=flue.local(str(recorded)))
    assert session(agent).prompt("what is in a.txt?") == "It says alpha."
    assert str(recorded) not in cassette.read_text()  # the recording names `<cwd>`, not the path
    monkeypatch.chdir(replayed)
    replay = ReplayModel(cassette)
    agent = make_agent(replay, sandbox=flue.local(str(replayed)))
    assert session(agent).prompt("what is in a.txt?") == "It says alpha."
    replay.assert_complete()
