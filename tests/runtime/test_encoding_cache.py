"""The tokenizer's ranks cache (flue_nb.runtime.core.encoding_cache): same tokens, passed over
when it cannot be trusted or written."""

from __future__ import annotations

import marshal

import pytest
import tiktoken

from flue_nb.runtime.cache import cache_dir
from flue_nb.runtime.core import encoding_cache
from flue_nb.runtime.core.encoding_cache import load_encoding
from flue_nb.runtime.core.tokens import ENCODING_NAME

TEXTS = [
    "hello world",
    "see <|endoftext|> here",
    "The quick brown fox.\n    def f(x): return x ** 2  # café 🚀 日本語のテキスト",
    "".join(chr(c) for c in range(32, 3000, 7)) * 3,
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(encoding_cache, "_LOADED", {})  # each load below goes to the cache or tiktoken
    monkeypatch.setenv("FLUE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _files(cache):
    return sorted(p.name for p in cache.glob("*.marshal")) if cache.exists() else []


def _expected(text: str) -> list[int]:
    return tiktoken.get_encoding(ENCODING_NAME).encode_ordinary(text)


def test_a_cached_encoding_encodes_every_text_as_tiktoken_does(cache, monkeypatch) -> None:
    first = load_encoding(ENCODING_NAME)
    path = encoding_cache._cache_file(ENCODING_NAME, tiktoken)
    assert path is not None and _files(cache) == [path.name]
    assert load_encoding(ENCODING_NAME) is first  # once per process
    encoding_cache._LOADED.clear()
    expected = {text: _expected(text) for text in TEXTS}

    def no_load(name):
        raise AssertionError("loaded through tiktoken, not from the cache")

    monkeypatch.setattr(tiktoken, "get_encoding", no_load)
    again = load_encoding(ENCODING_NAME)
    assert again is not first
    for text, ids in expected.items():
        assert again.encode_ordinary(text) == ids
    assert again.max_token_value == first.max_token_value and again.name == ENCODING_NAME


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage, not marshal", marshal.dumps({"name": ENCODING_NAME}), marshal.dumps([1, 2, 3])],
    ids=["empty", "garbage", "missing keys", "not a dict"],
)
def test_a_damaged_cache_file_is_passed_over_and_written_again(cache, content) -> None:
    load_encoding(ENCODING_NAME)
    (path,) = cache.glob("*.marshal")
    good = path.read_bytes()
    path.write_bytes(content)
    encoding_cache._LOADED.clear()
    encoding = load_encoding(ENCODING_NAME)
    assert encoding.encode_ordinary(TEXTS[2]) == _expected(TEXTS[2])
    assert path.read_bytes() == good


def test_ranks_tiktoken_refuses_are_passed_over(cache) -> None:
    load_encoding(ENCODING_NAME)
    (path,) = cache.glob("*.marshal")
    params = marshal.loads(path.read_bytes())
    params["special_tokens"] = {"<|x|>": "not an id"}
    path.write_bytes(marshal.dumps(params))
    encoding_cache._LOADED.clear()
    assert load_encoding(ENCODING_NAME).encode_ordinary("hello world") == [15339, 1917]
    assert "<|x|>" not in marshal.loads(path.read_bytes())["special_tokens"]  # loaded by tiktoken, written again


def test_an_unwritable_cache_dir_still_counts(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(encoding_cache, "_LOADED", {})
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("FLUE_CACHE_DIR", str(blocked / "cache"))
    assert load_encoding(ENCODING_NAME).encode_ordinary("hello world") == [15339, 1917]
    assert blocked.read_text() == "not a directory"


def test_another_tiktoken_version_reads_a_cache_file_of_its_own(cache, monkeypatch) -> None:
    load_encoding(ENCODING_NAME)
    monkeypatch.setattr(tiktoken, "__version__", "0.0.0-other")
    encoding_cache._LOADED.clear()
    load_encoding(ENCODING_NAME)
    assert len(_files(cache)) == 2


def test_an_unknown_encoding_is_not_cached_and_raises_as_tiktoken_does(cache) -> None:
    with pytest.raises(ValueError, match="Unknown encoding"):
        load_encoding("no_such_encoding_for_flue_nb")
    assert _files(cache) == []


def test_the_cache_dir_follows_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("FLUE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "flue_nb"
    monkeypatch.setenv("FLUE_CACHE_DIR", str(tmp_path / "own"))
    assert cache_dir() == tmp_path / "own"
