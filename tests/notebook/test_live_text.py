"""The live document's source edits: only the part that differs is replaced, in pycrdt's UTF-8 offsets."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "old,new",
    [
        ("print(x)", "print(x + 1)"),
        ("héllo 🌍 wörld", "héllo 🌎 wörld"),
        ("aaa", "aa"),
        ("", "new ✓"),
        ("gone 🌍", ""),
        ("ab🌍ab", "ab🌍🌍ab"),
    ],
)
def test_an_edit_replaces_only_what_differs_and_counts_utf8(old, new):
    from pycrdt import Doc, Text

    from flue_nb.notebook.document.live_document import replace_text

    doc: Doc = Doc()
    text = doc.get("source", type=Text)
    text += old
    changes: list[object] = []
    text.observe(lambda event: changes.append(event.delta))
    replace_text(text, old, new)
    assert str(text) == new
    if old and new and old[0] == new[0]:
        assert "retain" in str(changes[0])  # the common start was kept, not rewritten
