"""The reference `server-filesystem`, `server-memory` (npm), `mcp-server-time` and `mcp-server-git`
(PyPI) through `use_mcp(...)`: what a user asks of each, their errors, huge results, unicode, a
batch of writes, a server that fails to start, and servers killed between prompts.

The servers are the real packages (tests/runtime/real_mcp.py installs them); the model is offline.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from agents import make_agent, session
from mcp_client import names, results, signals
from real_mcp import Unavailable, kill_child, node_command, python_servers

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime.tools.mcp import close_mcp_servers


def _or_skip(get):
    try:
        return get()
    except Unavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the reference MCP servers must run under CI: {exc}")
        pytest.skip(f"a reference MCP server cannot be had: {exc}")


@pytest.fixture(scope="module")
def node_ready() -> None:
    _or_skip(lambda: node_command("filesystem"))


@pytest.fixture(scope="module")
def python_bin():
    return _or_skip(python_servers)


@pytest.fixture(autouse=True)
def _close_servers():
    yield
    close_mcp_servers()


def _prompt(servers: dict[str, dict], *batches):
    """A prompt whose model makes each batch of calls in turn; the results of each batch."""
    model = ScriptedModel([*(reply("", *b) for b in batches), reply("done")])

    def declare() -> None:
        for name, kw in servers.items():
            flue.use_mcp(name, **kw)

    assert session(make_agent(model, extra=declare)).prompt("go") == "done"
    return [results(model.requests[i + 1])[-len(b) :] for i, b in enumerate(batches)], model


# --- server-filesystem --------------------------------------------------------------------------


@pytest.fixture
def fs(node_ready, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    return root, {"fs": {"command": node_command("filesystem", str(root))}}


def test_filesystem_lists_its_tools(fs):
    _, servers = fs
    [[listed]], model = _prompt(servers, [tool_call("mcp__fs__list_allowed_directories")])
    offered = names(model.requests[0])
    for tool in ("read_text_file", "write_file", "edit_file", "directory_tree", "search_files", "read_media_file"):
        assert f"mcp__fs__{tool}" in offered
    assert "root" in listed.content


def test_filesystem_write_then_read_a_unicode_file_in_one_batch(fs):
    root, servers = fs
    path = str(root / "ünï_文件.txt")
    [[wrote, read]], _ = _prompt(
        servers,
        [
            tool_call("mcp__fs__write_file", path=path, content="日本語 🎉\nشكرا\n"),
            tool_call("mcp__fs__read_text_file", path=path),
        ],
    )
    assert not wrote.is_error and read.content == "日本語 🎉\nشكرا\n"


def test_filesystem_a_huge_file_is_cut_to_the_limit_with_a_marker(fs):
    root, servers = fs
    (root / "big.txt").write_text("".join(f"line {i} " + "x" * 60 + "\n" for i in range(100_000)))
    [[big]], _ = _prompt(servers, [tool_call("mcp__fs__read_text_file", path=str(root / "big.txt"))])
    assert len(big.content.encode()) < 60_000
    assert big.content.startswith("line 0 ") and "cut to the 2000-line / 50 KB limit" in big.content


def test_filesystem_a_path_outside_its_roots_is_an_error_result(fs):
    _, servers = fs
    [[denied]], _ = _prompt(servers, [tool_call("mcp__fs__read_text_file", path="/etc/hostname")])
    assert denied.is_error and "Access denied" in denied.content


def test_filesystem_one_missing_file_of_several_is_reported_beside_the_others(fs):
    root, servers = fs
    (root / "a.txt").write_text("alpha\n")
    [[both]], _ = _prompt(
        servers, [tool_call("mcp__fs__read_multiple_files", paths=[str(root / "a.txt"), str(root / "nope.txt")])]
    )
    assert "alpha" in both.content and "ENOENT" in both.content


def test_filesystem_an_edit_dry_run_shows_the_diff_and_leaves_the_file(fs):
    root, servers = fs
    (root / "a.txt").write_text("one\ntwo\n")
    edits = [{"oldText": "two", "newText": "deux"}]
    [[diff]], _ = _prompt(
        servers, [tool_call("mcp__fs__edit_file", path=str(root / "a.txt"), edits=edits, dryRun=True)]
    )
    assert "-two" in diff.content and "+deux" in diff.content
    assert (root / "a.txt").read_text() == "one\ntwo\n"


def test_filesystem_a_picture_is_an_image_for_the_model(fs):
    from PIL import Image

    root, servers = fs
    Image.new("RGB", (40, 30), "red").save(root / "red.png")
    [[pic]], _ = _prompt(servers, [tool_call("mcp__fs__read_media_file", path=str(root / "red.png"))])
    assert not pic.is_error, pic.content
    [image] = pic.images
    assert (image.width, image.height) == (40, 30)


def test_filesystem_eight_writes_in_one_batch_all_land_and_a_later_listing_sees_them(fs):
    root, servers = fs
    writes = [tool_call("mcp__fs__write_file", path=str(root / f"f{i}.txt"), content=str(i)) for i in range(8)]
    [done, [listing]], _ = _prompt(servers, writes, [tool_call("mcp__fs__list_directory", path=str(root))])
    assert all(not r.is_error for r in done)
    assert sorted((root / f"f{i}.txt").read_text() for i in range(8)) == [str(i) for i in range(8)]
    assert all(f"[FILE] f{i}.txt" in listing.content for i in range(8))


def test_filesystem_a_tree_and_a_search_answer_in_json_and_lines(fs):
    root, servers = fs
    (root / "sub").mkdir()
    (root / "sub" / "needle.py").write_text("x = 1\n")
    [[tree, found]], _ = _prompt(
        servers,
        [
            tool_call("mcp__fs__directory_tree", path=str(root)),
            tool_call("mcp__fs__search_files", path=str(root), pattern="**/needle*"),
        ],
    )
    assert json.loads(tree.content)[0]["name"] == "sub"
    assert "needle.py" in found.content


def test_filesystem_a_root_that_does_not_exist_fails_the_submission_quoting_the_servers_stderr(node_ready, tmp_path):
    model = ScriptedModel(["never"])
    missing = str(tmp_path / "missing")
    agent = make_agent(model, extra=lambda: flue.use_mcp("fs", command=node_command("filesystem", missing)))
    with pytest.raises(flue.McpConnectionError) as info:
        session(agent).prompt("hello")
    assert "`fs`" in info.value.message and "missing" in info.value.message
    assert model.requests == []


def test_filesystem_optional_and_failing_to_start_runs_without_it_and_tells_the_model(node_ready, tmp_path):
    model = ScriptedModel(["fine"])
    missing = str(tmp_path / "missing")
    agent = make_agent(
        model, extra=lambda: flue.use_mcp("fs", command=node_command("filesystem", missing), optional=True)
    )
    assert session(agent).prompt("hello") == "fine"
    assert not any(n.startswith("mcp__fs__") for n in names(model.requests[0]))
    [signal] = signals(model.requests[0])
    assert "MCP server `fs` is unavailable" in signal.text


# --- server-memory ------------------------------------------------------------------------------


@pytest.fixture
def memory(node_ready, tmp_path):
    state = tmp_path / "memory.jsonl"
    return state, {"m": {"command": node_command("memory"), "env": {"MEMORY_FILE_PATH": str(state)}}}


def test_memory_a_write_then_a_read_in_one_batch_reads_what_was_written(memory):
    _, servers = memory
    entity = {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}
    [[made, graph]], _ = _prompt(
        servers, [tool_call("mcp__m__create_entities", entities=[entity]), tool_call("mcp__m__read_graph")]
    )
    assert not made.is_error
    assert [e["name"] for e in json.loads(graph.content)["entities"]] == ["Ada"]


def test_memory_sixteen_writes_in_one_batch_are_all_kept(memory):
    state, servers = memory
    entity = {"name": "Ada", "entityType": "person", "observations": []}
    adds = [
        tool_call("mcp__m__add_observations", observations=[{"entityName": "Ada", "contents": [f"fact {i}"]}])
        for i in range(16)
    ]
    [_, done, [graph]], _ = _prompt(
        servers,
        [tool_call("mcp__m__create_entities", entities=[entity])],
        adds,
        [tool_call("mcp__m__open_nodes", names=["Ada"])],
    )
    assert all(not r.is_error for r in done), [r.content for r in done if r.is_error]
    [ada] = json.loads(graph.content)["entities"]
    assert sorted(ada["observations"]) == sorted(f"fact {i}" for i in range(16))


def test_memory_survives_its_server_being_killed_between_prompts(memory):
    _, servers = memory
    model = ScriptedModel(
        [
            reply(
                "",
                tool_call(
                    "mcp__m__create_entities", entities=[{"name": "Bo", "entityType": "cat", "observations": []}]
                ),
            ),
            reply("made"),
            reply("", tool_call("mcp__m__search_nodes", query="Bo")),
            reply("found"),
        ]
    )
    s = session(make_agent(model, extra=lambda: flue.use_mcp("m", **servers["m"])))
    s.prompt("one")
    kill_child("server-memory")
    assert s.prompt("two") == "found"
    [found] = results(model.requests[3])[-1:]
    assert not found.is_error and '"Bo"' in found.content


def test_memory_an_unknown_entity_is_an_error_result(memory):
    _, servers = memory
    [[bad]], _ = _prompt(
        servers, [tool_call("mcp__m__add_observations", observations=[{"entityName": "Nobody", "contents": ["x"]}])]
    )
    assert bad.is_error and "Nobody" in bad.content


# --- mcp-server-time ----------------------------------------------------------------------------


def test_time_answers_the_current_time_and_a_conversion(python_bin):
    servers = {"t": {"command": [str(python_bin / "mcp-server-time")]}}
    [[now, converted]], model = _prompt(
        servers,
        [
            tool_call("mcp__t__get_current_time", timezone="Etc/UTC"),
            tool_call(
                "mcp__t__convert_time", source_timezone="Europe/London", time="12:00", target_timezone="Asia/Tokyo"
            ),
        ],
    )
    assert names(model.requests[0])[1:] == ["mcp__t__get_current_time", "mcp__t__convert_time"]
    assert json.loads(now.content)["timezone"] == "Etc/UTC"
    assert json.loads(converted.content)["target"]["datetime"].endswith("21:00:00+09:00")


def test_time_an_unknown_timezone_is_an_error_result_naming_it(python_bin):
    servers = {"t": {"command": [str(python_bin / "mcp-server-time")]}}
    [[bad]], _ = _prompt(servers, [tool_call("mcp__t__get_current_time", timezone="Mars/Olympus")])
    assert bad.is_error and "Mars/Olympus" in bad.content


def test_time_a_missing_required_argument_is_refused_before_the_call(python_bin):
    servers = {"t": {"command": [str(python_bin / "mcp-server-time")]}}
    [[bad]], _ = _prompt(servers, [tool_call("mcp__t__convert_time", source_timezone="Etc/UTC")])
    assert bad.is_error and "required" in bad.content


def test_time_a_python_server_killed_between_prompts_is_started_again(python_bin):
    model = ScriptedModel(
        [
            reply("", tool_call("mcp__t__get_current_time", timezone="Etc/UTC")),
            reply("one"),
            reply("", tool_call("mcp__t__get_current_time", timezone="Asia/Tokyo")),
            reply("two"),
        ]
    )
    s = session(make_agent(model, extra=lambda: flue.use_mcp("t", command=[str(python_bin / "mcp-server-time")])))
    s.prompt("one")
    kill_child("mcp-server-time")
    assert s.prompt("two") == "two"
    [again] = results(model.requests[3])[-1:]
    assert not again.is_error and json.loads(again.content)["timezone"] == "Asia/Tokyo"


# --- mcp-server-git -----------------------------------------------------------------------------


@pytest.fixture
def repo(python_bin, tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.test"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.test"}
    for cmd in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "config", "user.name", "t"],
        ["git", "config", "user.email", "t@example.test"],
    ):
        subprocess.run(cmd, cwd=path, check=True, env=env)
    return path, {"g": {"command": [str(python_bin / "mcp-server-git")]}}


def test_git_status_add_commit_and_log_with_a_unicode_message(repo):
    path, servers = repo
    (path / "a.txt").write_text("hello\n")
    [[status], [added], [committed], [log]], _ = _prompt(
        servers,
        [tool_call("mcp__g__git_status", repo_path=str(path))],
        [tool_call("mcp__g__git_add", repo_path=str(path), files=["a.txt"])],
        [tool_call("mcp__g__git_commit", repo_path=str(path), message="première: 修正 🎉")],
        [tool_call("mcp__g__git_log", repo_path=str(path))],
    )
    assert "a.txt" in status.content
    assert not added.is_error and not committed.is_error, (added.content, committed.content)
    assert "première: 修正 🎉" in log.content


def test_git_a_diff_of_a_huge_change_is_cut_to_the_limit(repo):
    path, servers = repo
    (path / "big.txt").write_text("".join(f"row {i}\n" for i in range(30_000)))
    [[diff]], _ = _prompt(servers, [tool_call("mcp__g__git_diff_unstaged", repo_path=str(path))])
    # untracked files have no unstaged diff; add it, then the staged diff is the huge one
    assert not diff.is_error
    [[_], [staged]], _ = _prompt(
        servers,
        [tool_call("mcp__g__git_add", repo_path=str(path), files=["big.txt"])],
        [tool_call("mcp__g__git_diff_staged", repo_path=str(path))],
    )
    assert "+row 0" in staged.content and "cut to the 2000-line / 50 KB limit" in staged.content


def test_git_a_folder_that_is_not_a_repository_is_an_error_result(repo, tmp_path):
    _, servers = repo
    plain = tmp_path / "plain"
    plain.mkdir()
    [[bad]], _ = _prompt(servers, [tool_call("mcp__g__git_status", repo_path=str(plain))])
    assert bad.is_error and "git_status" in bad.content


# --- several servers at once --------------------------------------------------------------------


def test_four_servers_in_one_agent_answer_one_batch(memory, python_bin, tmp_path):
    _, mem = memory
    root = tmp_path / "r"
    root.mkdir()
    servers = {
        **mem,
        "fs": {"command": node_command("filesystem", str(root))},
        "t": {"command": [str(python_bin / "mcp-server-time")]},
        "e": {"command": node_command("everything")},
    }
    [[graph, listed, now, echo]], model = _prompt(
        servers,
        [
            tool_call("mcp__m__read_graph"),
            tool_call("mcp__fs__list_allowed_directories"),
            tool_call("mcp__t__get_current_time", timezone="Etc/UTC"),
            tool_call("mcp__e__echo", message="hi"),
        ],
    )
    assert json.loads(graph.content) == {"entities": [], "relations": []}
    assert str(root) in listed.content or root.name in listed.content
    assert json.loads(now.content)["timezone"] == "Etc/UTC"
    assert echo.content == "Echo: hi"
