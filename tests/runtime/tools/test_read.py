"""`read` (contract 2): paging, the 2000-line/50 KB cut and its marker, giant lines, errors."""

from __future__ import annotations

import re
import tracemalloc
from pathlib import Path

MARK = re.compile(r"Use offset=(\d+) to continue\.")


def body(content: str) -> str:
    """The text before the marker."""
    return content.split("\n\n[", 1)[0]


def test_read_2_1_offset_is_a_1_indexed_line_number(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    out = call(tools["read"], {"path": "f.txt", "offset": 3, "limit": 2})
    assert not out.is_error
    assert out.content == "line3\nline4"


def test_read_2_1_limit_is_a_maximum_line_count(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("a\nb\nc\n")
    assert call(tools["read"], {"path": "f.txt", "limit": 2}).content == "a\nb"
    assert call(tools["read"], {"path": "f.txt", "limit": 50}).content == "a\nb\nc"


def test_read_2_2_truncation_marker_after_2000_lines(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("".join(f"l{i}\n" for i in range(1, 2501)))
    out = call(tools["read"], {"path": "f.txt"})
    lines = body(out.content).split("\n")
    assert len(lines) == 2000 and lines[0] == "l1" and lines[-1] == "l2000"
    assert "Use offset=2001 to continue." in out.content
    assert "1-2000" in out.content  # names the range shown
    assert not out.is_error


def test_read_2_2_truncation_at_51200_bytes_whole_lines(tmp_path: Path, tools, call) -> None:
    # 99 characters + newline = 100 bytes a line: 512 lines take 51,199 bytes, 513 would not fit.
    (tmp_path / "f.txt").write_text("".join(f"{i:05d}" + "x" * 94 + "\n" for i in range(1, 1001)))
    out = call(tools["read"], {"path": "f.txt"})
    text = body(out.content)
    assert len(text.encode()) <= 51200
    lines = text.split("\n")
    assert len(lines) == 512 and all(len(ln) == 99 for ln in lines)
    assert MARK.search(out.content).group(1) == "513"


def test_read_2_2_exactly_51200_bytes_is_not_cut(tmp_path: Path, tools, call) -> None:
    # 512 lines of 99 bytes + 511 newlines = 51,199; one more byte on the last line makes 51,200.
    text = "\n".join(["y" * 99] * 511 + ["y" * 100])
    (tmp_path / "f.txt").write_text(text)
    out = call(tools["read"], {"path": "f.txt"})
    assert out.content == text and "Use offset" not in out.content


def test_read_2_2_multibyte_text_is_cut_at_line_ends(tmp_path: Path, tools, call) -> None:
    line = "é€😀" * 30  # 2+3+4 bytes per group
    (tmp_path / "f.txt").write_text((line + "\n") * 1000)
    out = call(tools["read"], {"path": "f.txt"})
    text = body(out.content)
    assert len(text.encode()) <= 51200 and "\ufffd" not in text
    assert set(text.split("\n")) == {line}
    n = len(text.split("\n"))
    assert f"Use offset={n + 1} to continue." in out.content


def test_read_2_2_paging_with_the_marker_reads_the_whole_file(tmp_path: Path, tools, call) -> None:
    lines = [f"row {i} " + "z" * (i % 300) for i in range(1, 6001)]
    (tmp_path / "f.txt").write_text("\n".join(lines) + "\n")
    got: list[str] = []
    offset = 1
    while True:
        out = call(tools["read"], {"path": "f.txt", "offset": offset})
        got.extend(body(out.content).split("\n"))
        m = MARK.search(out.content)
        if not m:
            break
        offset = int(m.group(1))
        assert offset == len(got) + 1  # N is the first line not shown
    assert got == lines


def test_read_2_2_no_marker_when_only_limit_cut(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("".join(f"{i}\n" for i in range(100)))
    out = call(tools["read"], {"path": "f.txt", "limit": 10})
    assert out.content == "\n".join(str(i) for i in range(10))
    assert "offset=" not in out.content


def test_read_2_2_marker_when_the_cap_cuts_before_limit(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("".join(f"{i}\n" for i in range(3000)))
    out = call(tools["read"], {"path": "f.txt", "offset": 11, "limit": 2500})
    assert "Use offset=2011 to continue." in out.content
    assert body(out.content).split("\n")[0] == "10"


def test_read_2_2_no_marker_when_the_file_fits(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("".join(f"{i}\n" for i in range(2000)))
    out = call(tools["read"], {"path": "f.txt"})
    assert "offset=" not in out.content and len(out.content.split("\n")) == 2000


def test_read_2_3_offset_past_end_names_the_line_count(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("a\nb\nc\nd\ne\nf\ng\n")
    out = call(tools["read"], {"path": "f.txt", "offset": 8})
    assert out.is_error and "7 lines" in out.content
    assert call(tools["read"], {"path": "f.txt", "offset": 7}).content == "g"


def test_read_2_3_line_count_without_final_newline(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("a\nb\nc")
    out = call(tools["read"], {"path": "f.txt", "offset": 10})
    assert out.is_error and "3 lines" in out.content


def test_read_2_3_line_count_of_a_file_spanning_many_chunks(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("".join(f"{i}\n" for i in range(700_000)) + "last")  # > 4 MB
    out = call(tools["read"], {"path": "f.txt", "offset": 800_000})
    assert out.is_error and "700001 lines" in out.content
    assert call(tools["read"], {"path": "f.txt", "offset": 700_001}).content == "last"


def test_read_2_4_single_line_over_50kb_shows_its_first_50kb(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("q" * 100_000 + "\nnext\n")
    out = call(tools["read"], {"path": "f.txt"})
    assert not out.is_error
    assert body(out.content) == "q" * 51200
    assert "cannot be reached with offset/limit" in out.content
    assert "Use offset=2 to continue." in out.content


def test_read_2_4_giant_line_is_cut_on_a_character_boundary(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("a" + "€" * 40_000)  # 3-byte characters, shifted by one
    out = call(tools["read"], {"path": "f.txt"})
    text = body(out.content)
    assert "\ufffd" not in text and len(text.encode()) <= 51200
    assert len(text.encode()) > 51200 - 3
    assert "cannot be reached" in out.content and "offset=" not in out.content.split("]")[-1]


def test_read_2_4_giant_line_after_short_lines_starts_the_next_page(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("short\n" + "w" * 60_000 + "\n")
    out = call(tools["read"], {"path": "f.txt"})
    assert body(out.content) == "short" and "Use offset=2 to continue." in out.content
    second = call(tools["read"], {"path": "f.txt", "offset": 2})
    assert body(second.content) == "w" * 51200 and "cannot be reached" in second.content


def test_read_2_5_no_line_numbers_are_added(tmp_path: Path, tools, call) -> None:
    text = "def f():\n    return 1\n\n# end"
    (tmp_path / "f.py").write_text(text)
    assert call(tools["read"], {"path": "f.py"}).content == text


def test_read_2_5_missing_file_is_an_error_result(tools, call) -> None:
    out = call(tools["read"], {"path": "nope.txt"})
    assert out.is_error and "not found" in out.content.lower() and "nope.txt" in out.content


def test_read_an_empty_file_says_so(tmp_path: Path, tools, call) -> None:
    (tmp_path / "e.txt").write_text("")
    out = call(tools["read"], {"path": "e.txt"})
    assert not out.is_error and "empty" in out.content


def test_read_a_window_of_a_1gb_file_with_small_peak_memory(tmp_path: Path, tools, call) -> None:
    big = tmp_path / "big.log"
    block = b"".join(b"%07d some log text here\n" % i for i in range(40_000))  # 1,040,000 bytes
    with big.open("wb") as f:
        for _ in range(1033):  # ~1 GiB
            f.write(block)
    lines_per_block = 40_000
    offset = lines_per_block * 1000 + 5  # near the end
    tracemalloc.start()
    try:
        out = call(tools["read"], {"path": str(big), "offset": offset, "limit": 3})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        big.unlink()  # pytest keeps the last runs' tmp dirs: do not leave a gigabyte behind
    assert out.content.split("\n") == [f"{i:07d} some log text here" for i in (4, 5, 6)]
    assert peak < 16 * 1024 * 1024, peak
