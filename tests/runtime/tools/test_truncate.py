"""The truncation helpers (contract 2.2, 5.1): whole lines only, 2000 lines or 51,200 bytes."""

from __future__ import annotations

from flue_nb.runtime.tools.truncate import Truncation, truncate_head, truncate_tail, utf8_prefix


def test_truncate_nothing_to_cut_returns_the_text_unchanged() -> None:
    for fn in (truncate_head, truncate_tail):
        assert fn("a\nb\n") == Truncation("a\nb\n", False, 2, 2, 1)
        assert fn("") == Truncation("", False, 0, 0, 1)


def test_truncate_head_2000_lines() -> None:
    text = "".join(f"{i}\n" for i in range(1, 2501))
    cut = truncate_head(text)
    assert (cut.truncated, cut.total_lines, cut.shown_lines, cut.first_line) == (
        True,
        2500,
        2000,
        1,
    )
    assert cut.text.split("\n") == [str(i) for i in range(1, 2001)]


def test_truncate_tail_2000_lines() -> None:
    cut = truncate_tail("".join(f"{i}\n" for i in range(1, 2501)))
    assert (cut.shown_lines, cut.first_line) == (2000, 501)
    assert cut.text.split("\n")[0] == "501" and cut.text.split("\n")[-1] == "2500"


def test_truncate_51200_bytes_counts_utf8_and_newlines() -> None:
    line = "€" * 33  # 99 bytes
    text = "\n".join([line] * 600)
    for fn in (truncate_head, truncate_tail):
        cut = fn(text)
        assert cut.shown_lines == 512 and len(cut.text.encode()) == 512 * 99 + 511 <= 51200


def test_truncate_never_cuts_inside_a_line() -> None:
    text = "short\n" + "x" * 60_000
    head, tail = truncate_head(text), truncate_tail(text)
    assert (head.text, head.shown_lines) == ("short", 1)
    assert (tail.text, tail.shown_lines, tail.truncated) == ("", 0, True)


def test_truncate_custom_limits_and_lone_surrogates() -> None:
    cut = truncate_head("a\nb\nc\nd", max_lines=2)
    assert (cut.text, cut.truncated) == ("a\nb", True)
    assert truncate_tail("ab\ncd\n\ud800", max_bytes=6).text == "cd\n\ud800"  # 2 + 1 + 3 bytes


def test_utf8_prefix_stops_before_a_split_character() -> None:
    data = ("a" + "€" * 10).encode()
    assert utf8_prefix(data, 5) == b"a" + "€".encode()  # 4 bytes: the next one would be split
    assert utf8_prefix(data, 100) == data
