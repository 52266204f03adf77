"""Tests for flue_nb.runtime.core.compaction, named after contract section 13's statements."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from flue_nb.runtime.core.compaction import (
    SUMMARY_SECTIONS,
    CompactionConfig,
    compacted_context,
    file_lists,
    format_summary,
    reserve_tokens,
    select_cut,
    should_compact,
    summary_request,
    threshold,
)
from flue_nb.runtime.core.tokens import TokenCounter
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.messages import (
    AssistantMessage,
    Message,
    SignalMessage,
    SummaryMessage,
    TextPart,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from flue_nb.runtime.providers.model import ModelInfo, ModelRequest, StreamEvent


class FakeModel:
    """The smallest object that satisfies the `Model` protocol."""

    info = ModelInfo("fake")

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Never called here."""
        raise NotImplementedError
        yield  # pragma: no cover


def _call(call_id: str, name: str, **args: object) -> AssistantMessage:
    return AssistantMessage([ToolCall(call_id, name, dict(args))])


def _users(n: int) -> list[Message]:
    return [UserMessage(f"m{i}") for i in range(n)]


# 13.1 threshold and reserve


def test_compaction_13_1_reserve_capped_at_20000() -> None:
    info = ModelInfo("big", context_window=200_000, max_output_tokens=64_000)
    assert reserve_tokens(info) == 20_000
    assert threshold(info) == 180_000


def test_compaction_13_1_reserve_is_max_output_when_below_cap() -> None:
    info = ModelInfo("m", context_window=200_000, max_output_tokens=8_192)
    assert reserve_tokens(info, CompactionConfig()) == 8_192
    assert threshold(info) == 191_808


def test_compaction_13_1_small_window_rule() -> None:
    # 2 x 8,000 ≥ 16,000: a third of the window instead.
    assert reserve_tokens(ModelInfo("s", context_window=16_000, max_output_tokens=8_000)) == 5_333
    # ...but never below 1,024.
    assert reserve_tokens(ModelInfo("xs", context_window=2_048, max_output_tokens=4_096)) == 1_024
    # Just below the rule's edge the ordinary reserve stands.
    assert reserve_tokens(ModelInfo("s", context_window=16_001, max_output_tokens=8_000)) == 8_000


def test_compaction_13_1_configured_reserve_wins_but_obeys_small_window_rule() -> None:
    info = ModelInfo("m", context_window=200_000, max_output_tokens=64_000)
    assert reserve_tokens(info, CompactionConfig(reserve_tokens=30_000)) == 30_000
    assert reserve_tokens(info, CompactionConfig(reserve_tokens=150_000)) == 66_666


def test_compaction_13_1_compacts_only_above_threshold() -> None:
    info = ModelInfo("m", context_window=100_000, max_output_tokens=10_000)
    assert not should_compact(90_000, info)
    assert should_compact(90_001, info)
    assert not should_compact(95_000, info, CompactionConfig(reserve_tokens=5_000))


# 13.2 where to cut


def test_compaction_13_2_keeps_the_most_recent_8000_tokens() -> None:
    messages = _users(20)
    assert select_cut(messages, [1_000] * 20, 8_000) == 12
    # The message that crosses 8,000 is kept whole, so all of the last 8,000 tokens stay.
    assert select_cut(messages, [1_500] * 20, 8_000) == 14


def test_compaction_13_2_keeps_at_least_the_last_message() -> None:
    messages = _users(5)
    assert select_cut(messages, [100, 100, 100, 100, 50_000], 8_000) == 4


def test_compaction_13_2_cut_never_separates_tool_result_from_call() -> None:
    call = AssistantMessage(
        [
            TextPart("two reads"),
            ToolCall("a", "read", {"path": "x"}),
            ToolCall("b", "read", {"path": "y"}),
        ]
    )
    messages: list[Message] = [
        UserMessage("old"),
        UserMessage("task"),
        call,
        ToolResultMessage("a", "read", "x" * 10),
        ToolResultMessage("b", "read", "y" * 10),
        UserMessage("next"),
    ]
    counts = [5_000, 5_000, 100, 3_000, 3_000, 1_000]
    # By tokens alone the cut would fall on the first result (index 3).
    cut = select_cut(messages, counts, 7_000)
    assert cut == 2
    kept_ids = {m.call_id for m in messages[cut:] if isinstance(m, ToolResultMessage)}
    kept_calls = {c.id for m in messages[cut:] if isinstance(m, AssistantMessage) for c in m.tool_calls}
    assert kept_ids <= kept_calls


def test_compaction_13_2_cut_moves_past_chained_tool_calls() -> None:
    messages: list[Message] = [
        UserMessage("task"),
        _call("a", "bash", command="ls"),
        SignalMessage("info", "a notice between a call and its result"),
        ToolResultMessage("a", "bash", "out"),
        _call("b", "bash", command="pwd"),
        ToolResultMessage("b", "bash", "/work"),
    ]
    counts = [10_000, 10, 10, 10, 10, 9_000]
    assert select_cut(messages, counts, 9_010) == 4
    assert select_cut(messages, counts, 9_025) == 1


def test_select_cut_returns_0_when_everything_fits() -> None:
    assert select_cut(_users(3), [100, 100, 100], 8_000) == 0
    assert select_cut([], [], 8_000) == 0


def test_select_cut_returns_0_when_only_a_previous_summary_would_fold() -> None:
    messages: list[Message] = [SummaryMessage("before"), *_users(3)]
    assert select_cut(messages, [500, 3_000, 3_000, 3_000], 8_000) == 0


def test_select_cut_rejects_counts_that_do_not_match() -> None:
    with pytest.raises(ConfigError, match="2 counts for 3 messages"):
        select_cut(_users(3), [1, 2], 8_000)
    with pytest.raises(ConfigError, match="keep_recent_tokens"):
        select_cut(_users(3), [1, 2, 3], 0)


# 13.4 configuration


def test_compaction_13_4_config_defaults() -> None:
    config = CompactionConfig()
    assert (config.reserve_tokens, config.keep_recent_tokens, config.model) == (None, 8_000, None)


@pytest.mark.parametrize("field", ["reserve_tokens", "keep_recent_tokens"])
@pytest.mark.parametrize("value", [0, -1, True, 1.5, "8000"])
def test_compaction_13_4_config_rejects_non_positive(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        CompactionConfig(**{field: value})


def test_compaction_13_4_config_rejects_unknown_keywords_and_positional_args() -> None:
    with pytest.raises(TypeError):
        CompactionConfig(keep_recent=8_000)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        CompactionConfig(20_000)  # type: ignore[misc]


def test_compaction_13_4_config_model_is_spec_model_or_none() -> None:
    assert CompactionConfig(model="anthropic/claude-haiku-4-5").model == "anthropic/claude-haiku-4-5"
    fake = FakeModel()
    assert CompactionConfig(model=fake).model is fake
    with pytest.raises(ConfigError, match="empty"):
        CompactionConfig(model="  ")
    with pytest.raises(ConfigError, match="model"):
        CompactionConfig(model=42)  # type: ignore[arg-type]


def test_compaction_13_4_config_is_frozen() -> None:
    config = CompactionConfig(keep_recent_tokens=4_000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.keep_recent_tokens = 1  # type: ignore[misc]


# 13.6 the summary


def test_compaction_13_6_file_lists_from_read_write_edit() -> None:
    messages: list[Message] = [
        _call("1", "read", path="docs/a b.md"),
        _call("2", "edit", path="src/app.py", old_text="x", new_text="y"),
        _call("3", "write", path="/abs/new.txt", content="hi"),
        _call("4", "read", path="src/app.py"),
        _call("5", "grep", pattern="TODO", path="src"),
        _call("6", "edit", path="never/changed.py", old_text="", new_text="z"),
        ToolResultMessage("6", "edit", "old_text is empty", is_error=True),
        _call("7", "bash", command="cat secret.txt"),
    ]
    assert file_lists(messages) == (["docs/a b.md"], ["/abs/new.txt", "src/app.py"])


def test_compaction_13_6_file_lists_accumulate_across_summaries() -> None:
    earlier = SummaryMessage(format_summary("## Goal\nship", ["old/read.py"], ["old/changed.py"]))
    messages: list[Message] = [
        earlier,
        _call("1", "write", path="new.py", content=""),
        _call("2", "edit", path="old/read.py"),
    ]
    assert file_lists(messages) == ([], ["new.py", "old/changed.py", "old/read.py"])


def test_compaction_13_6_summary_prompt_sections_and_file_lists() -> None:
    folded: list[Message] = [
        UserMessage("Fix the failing test in tests/test_parse.py"),
        AssistantMessage([TextPart("Looking."), ToolCall("c1", "read", {"path": "src/parse.py"})]),
        ToolResultMessage("c1", "read", "def parse(s):\n    raise KeyError('depth')"),
        SignalMessage("resources", "skill `deploy` mounted"),
    ]
    read, modified = file_lists(folded)
    request = summary_request(folded, files_read=read, files_modified=modified, max_tokens=4_000)
    assert isinstance(request, ModelRequest)
    assert request.purpose == "compaction"
    assert request.tools == []
    assert request.max_tokens == 4_000
    for section in SUMMARY_SECTIONS:
        assert f"## {section}" in request.system
    assert "exact" in request.system.lower() and "error" in request.system.lower()
    assert len(request.messages) == 1 and isinstance(request.messages[0], UserMessage)
    text = request.messages[0].text
    for needle in [
        "tests/test_parse.py",
        "src/parse.py",
        "KeyError('depth')",
        "skill `deploy` mounted",
        "read",
    ]:
        assert needle in text
    assert "<read-files>\nsrc/parse.py\n</read-files>" in text


def test_summary_request_merges_a_previous_summary() -> None:
    request = summary_request([UserMessage("more")], previous_summary="## Goal\nport to rust")
    text = request.messages[0].text
    assert "<previous-summary>\n## Goal\nport to rust\n</previous-summary>" in text
    assert "previous summary" in request.system


def test_summary_request_clips_huge_tool_output_and_arguments() -> None:
    folded: list[Message] = [
        AssistantMessage([ToolCall("c1", "write", {"path": "big.txt", "content": "w" * 100_000})]),
        ToolResultMessage("c1", "bash", "START" + "z" * 100_000, is_error=True),
    ]
    text = summary_request(folded).messages[0].text
    assert len(text) < 10_000
    assert "big.txt" in text and "START" in text and "Tool error" in text
    assert "more characters not shown" in text


def test_compaction_13_6_format_summary_appends_exact_paths() -> None:
    paths_read = ["docs/notes with space.md", "données/é.csv"]
    paths_changed = ["/abs/path/main.py"]
    summary = format_summary("## Goal\nShip it.\n", paths_read, paths_changed)
    assert summary.startswith("## Goal\nShip it.")
    assert "<read-files>\ndocs/notes with space.md\ndonnées/é.csv\n</read-files>" in summary
    assert "<modified-files>\n/abs/path/main.py\n</modified-files>" in summary


def test_format_summary_keeps_one_copy_of_lists_the_model_repeated() -> None:
    echoed = "## Goal\nx\n\n<read-files>\nstale.py\n</read-files>\n## Next steps\ny"
    summary = format_summary(echoed, ["a.py"], [])
    assert summary.count("<read-files>") == 1
    assert "stale.py" not in summary and "## Next steps" in summary
    assert "<modified-files>" not in summary


def test_compaction_13_6_compacted_context_is_summary_then_kept() -> None:
    user = UserMessage("latest")
    result = ToolResultMessage("c1", "bash", "ok")
    assistant = AssistantMessage([ToolCall("c1", "bash", {"command": "ls"})], usage=Usage(150_000, 100))
    context = compacted_context("## Goal\nx", [assistant, result, user])
    assert isinstance(context[0], SummaryMessage) and context[0].text == "## Goal\nx"
    assert context[2] is result and context[3] is user
    assert isinstance(context[1], AssistantMessage)
    assert context[1].parts == assistant.parts and context[1].usage is None
    assert assistant.usage is not None  # the stored original is untouched


def test_used_tokens_after_compaction_ignores_usage_from_before_the_fold() -> None:
    counter = TokenCounter()
    kept = [AssistantMessage([TextPart("done")], usage=Usage(170_000, 500)), UserMessage("next")]
    context = compacted_context("short summary", kept)
    assert counter.used_tokens(context) < 1_000


def test_compaction_end_to_end_with_a_fake_summariser() -> None:
    history: list[Message] = [UserMessage("Refactor src/core.py; keep the public API.")]
    for i in range(40):
        history.append(AssistantMessage([ToolCall(f"c{i}", "edit" if i % 2 else "read", {"path": f"src/m{i}.py"})]))
        history.append(ToolResultMessage(f"c{i}", "read", "line\n" * 400))
    history.append(AssistantMessage([TextPart("Half done.")], usage=Usage(185_000, 200)))
    history.append(UserMessage("continue"))
    info = ModelInfo("m", context_window=200_000, max_output_tokens=32_000)
    config = CompactionConfig()
    counter = TokenCounter()
    assert should_compact(counter.used_tokens(history), info, config)

    cut = select_cut(history, counter.count_messages(history), config.keep_recent_tokens)
    assert 0 < cut < len(history)
    folded, kept = history[:cut], history[cut:]
    read, modified = file_lists(folded)
    request = summary_request(folded, files_read=read, files_modified=modified)
    assert "Refactor src/core.py" in request.messages[0].text
    summary = format_summary("## Goal\nRefactor.", read, modified)  # the model forgot the paths
    context = compacted_context(summary, kept)
    assert "src/m1.py" in context[0].text and "src/m0.py" in context[0].text
    assert not should_compact(counter.used_tokens(context), info, config)
    assert sum(counter.count_messages(kept)) >= config.keep_recent_tokens


def test_compaction_module_is_pure() -> None:
    code = (
        "import sys, flue_nb.runtime.core.compaction\n"
        "bad = {'sqlite3', 'socket', 'tiktoken', 'anthropic'} & set(sys.modules)\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
