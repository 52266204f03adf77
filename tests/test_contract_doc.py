"""docs/contract.md states every contract statement the code and the tests cite by number."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"[Cc]ontract(?: §| )?(\d+(?:\.\d+)?)\b")
TEST_NAME = re.compile(r"def test_[a-z]+_(\d+)_(\d+)_")


def _cited() -> dict[str, str]:
    cited: dict[str, str] = {}
    for folder in ("flue_nb", "tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            for m in CITATION.finditer(text):
                cited.setdefault(m.group(1), str(path.relative_to(ROOT)))
            for m in TEST_NAME.finditer(text):
                cited.setdefault(f"{m.group(1)}.{m.group(2)}", str(path.relative_to(ROOT)))
    return cited


def test_every_cited_contract_number_is_stated_in_docs_contract_md():
    doc = (ROOT / "docs" / "contract.md").read_text()
    stated = set(re.findall(r"^- \*\*(\d+\.\d+)\*\*", doc, re.M)) | set(re.findall(r"^## (\d+)\. ", doc, re.M))
    cited = _cited()
    assert len(cited) > 40  # the scan finds the citations at all
    missing = {n: where for n, where in cited.items() if n not in stated}
    assert not missing, f"cited but not stated in docs/contract.md: {missing}"
