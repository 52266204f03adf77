"""The saved notebook is read without nbformat where it is a plain v4 file, and gives the cells
nbformat's `read(as_version=4)` gives; everything else is still read by nbformat."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from flue_nb.notebook.document import saved
from flue_nb.notebook.document.protocol import DocumentError

ROOT = Path(__file__).resolve().parents[2]


def _v4(cells: list[dict[str, Any]], minor: int = 5) -> dict[str, Any]:
    return {"nbformat": 4, "nbformat_minor": minor, "metadata": {"signature": "x"}, "cells": cells}


def _code(source: Any, outputs: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "source": source,
        "metadata": {"trusted": True, "tags": ["t"]},
        "outputs": outputs,
        "execution_count": 3,
        **extra,
    }


SPLIT = _v4(
    [
        _code(
            ["a = 1\n", "print(a)"],
            [
                {"output_type": "stream", "name": "stdout", "text": ["1\n", "2\n"]},
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {
                        "text/plain": ["x\n", "y"],
                        "application/json": ["kept", "as a list"],
                        "application/vnd.x+json": {"k": ["v"]},
                        "image/png": "iVBORw0KGgo=",
                    },
                },
                {
                    "output_type": "execute_result",
                    "metadata": {},
                    "execution_count": 3,
                    "data": {"text/html": ["<b>", "</b>"]},
                },
                {"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["t1", "t2"]},
            ],
            id="c1",
        ),
        {"cell_type": "markdown", "id": "m1", "source": ["# T\n", "text"], "metadata": {}},
        {"cell_type": "raw", "id": "r1", "source": "raw", "metadata": {}},
        {"cell_type": "heading", "id": "h1", "source": "odd kind", "metadata": {}},
    ]
)


def _files(tmp_path: Path) -> list[Path]:
    made = {
        "split.ipynb": SPLIT,
        "v44-no-ids.ipynb": _v4([_code("x", []), _code(["y\n", "z"], [])], minor=4),
        "v45-missing-id.ipynb": _v4([_code("x", [], id="a"), _code("y", [])]),
        "v45-repeated-ids.ipynb": _v4([_code("x", [], id="a"), _code("y", [], id="a")]),
    }
    for name, nb in made.items():
        (tmp_path / name).write_text(json.dumps(nb))
    return [*(tmp_path / n for n in made), *sorted((ROOT / "notebooks").glob("*.ipynb"))]


def _shape(cells: list[Any]) -> list[Any]:
    return [(c.id, c.kind, c.source, c.execution_count, list(c.outputs), c.metadata) for c in cells]


def test_cells_are_those_nbformat_reads(tmp_path: Path) -> None:
    files = _files(tmp_path)
    assert len(files) > 10  # the repository's tours are in it
    plain = 0
    for path in files:
        if saved._plain_v4_cells(json.loads(path.read_text())) is not None:
            plain += 1
            assert _shape(saved._read(str(path))) == _shape(saved._read_with_nbformat(str(path), path.read_text())), (
                path.name
            )
            continue
        with warnings.catch_warnings():  # nbformat warns as it repairs the ids, with fresh random ones
            warnings.simplefilter("ignore")
            [a, b] = saved._read(str(path))
        assert (a.id, b.id != a.id, b.source) == ("a", True, "y")
    assert plain == len(files) - 2  # all but the v4.5 files whose ids nbformat repairs
    [code, md, raw, odd] = saved._read(str(tmp_path / "split.ipynb"))
    assert code.outputs[1]["data"]["application/json"] == ["kept", "as a list"]  # checked by hand, too
    assert (code.source, code.outputs[0]["text"], md.source, odd.kind) == (
        "a = 1\nprint(a)",
        "1\n2\n",
        "# T\ntext",
        "raw",
    )
    assert code.metadata == {"tags": ["t"]}


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"nbformat": 4, "nbformat_minor": 4, "cells": [{"cell_type": "code", "source": [1, 2]}]}),
        json.dumps({"nbformat": 99, "cells": []}),
        json.dumps([1, 2]),
    ],
)
def test_an_unreadable_file_is_one_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.ipynb"
    path.write_text(text)
    with pytest.raises(DocumentError, match="is not a readable .ipynb"):
        saved._read(str(path))


def test_a_plain_notebook_is_read_without_importing_nbformat() -> None:
    code = (
        "import sys; from flue_nb.notebook.document import saved;"
        f"cells = saved._read({str(ROOT / 'notebooks' / 'quickstart.ipynb')!r});"
        "print(len(cells), 'nbformat' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) > 3 and out[1] == "False"
