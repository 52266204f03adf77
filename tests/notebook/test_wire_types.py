"""The chat widget's wire is declared once (`chat.wire`) and checked on both sides.

Python: mypy checks the code against the TypedDicts, and these tests check that the widget syncs
the traits they declare. JavaScript: `views/chat/wire.d.ts` is what `chat._wire_ts` writes from them
now, and `tsc` (strict, over `chat.js`'s JSDoc: its `tsconfig.json`) checks `chat.js` against
it. TypeScript comes from the npm registry once (pinned, one package with no dependencies) into
the user's cache, under a file lock for parallel workers; without node or npm the checks skip
(and fail under CI=true).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Literal, TypedDict, get_args, get_origin, get_type_hints, is_typeddict

import anywidget
import pytest
import traitlets

from flue_nb.notebook.views.chat import _wire_ts, wire
from flue_nb.notebook.views.chat._vendor import Vendor
from flue_nb.notebook.views.chat.widget import ChatWidget

TYPESCRIPT = "5.9.3"
STATIC = _wire_ts.PATH.parent


def _need(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        _unavailable(f"`{program}` is not installed here")
    assert found is not None
    return found


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the wire's type check cannot run, and CI must run it: {why}")
    pytest.skip(why)


def _tsc() -> list[str]:
    """The command running the pinned `tsc`, installed into the user's cache the first time."""
    node, npm = _need("node"), _need("npm")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flue_nb"
    home = cache / f"typescript-{TYPESCRIPT}"
    tsc = home / "node_modules" / "typescript" / "bin" / "tsc"
    if not tsc.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / f"typescript-{TYPESCRIPT}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one install; other workers wait for it
            if not tsc.exists():
                # Into a new directory, moved into place whole: a killed install leaves no half.
                tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".typescript-"))
                args = [npm, "install", "--prefix", str(tmp), "--no-save", "--no-package-lock", "--no-audit"]
                done = subprocess.run(
                    [*args, "--no-fund", f"typescript@{TYPESCRIPT}"], capture_output=True, text=True, timeout=300
                )
                if done.returncode != 0:
                    shutil.rmtree(tmp, ignore_errors=True)
                    _unavailable(f"npm could not install typescript@{TYPESCRIPT}: {done.stderr[-600:]}")
                tmp.rename(home)
    return [node, str(tsc)]


def _check(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_tsc(), "-p", str(project), "--pretty", "false"], capture_output=True, text=True, timeout=300
    )


def test_the_committed_declarations_are_what_the_typeddicts_say_now() -> None:
    assert _wire_ts.PATH.read_text(encoding="utf-8") == _wire_ts.declarations(), (
        "views/chat/wire.d.ts is stale: run `python -m flue_nb.notebook.views.chat._wire_ts`"
    )


def test_every_wire_type_is_declared_for_the_browser() -> None:
    declared = {name for name, _ in _wire_ts._DECLARED}
    shapes = {n for n, v in vars(wire).items() if is_typeddict(v) and not n.startswith("_")}
    assert shapes <= declared


_TRAIT_TYPES: dict[type[traitlets.TraitType[Any, Any]], tuple[Any, ...]] = {
    traitlets.Unicode: (str, Literal),
    traitlets.Bool: (bool,),
    traitlets.Int: (int,),
    traitlets.List: (list,),
    traitlets.Dict: (dict, TypedDict),
    traitlets.Instance: (str,),  # a widget reference travels as "IPY_MODEL_<id>" (or null)
}


def _kind(hint: Any) -> set[Any]:
    if is_typeddict(hint):
        return {TypedDict}
    args = get_args(hint)
    if get_origin(hint) is Literal:
        return {Literal}
    if args and get_origin(hint) not in (list, dict):
        return set().union(*(_kind(a) for a in args if a is not type(None)))
    return {get_origin(hint) or hint}


@pytest.mark.parametrize(("widget", "shape"), [(ChatWidget, wire.Traits), (Vendor, wire.VendorTraits)])
def test_the_widget_syncs_the_traits_the_wire_declares(widget: type[anywidget.AnyWidget], shape: Any) -> None:
    base = set(anywidget.AnyWidget.class_trait_names(sync=True))
    traits = {n: t for n, t in widget.class_traits(sync=True).items() if n not in base}
    hints = get_type_hints(shape)
    assert set(traits) == set(hints)
    for name, trait in traits.items():
        assert _kind(hints[name]) <= set(_TRAIT_TYPES[type(trait)]), (name, hints[name], type(trait).__name__)


def test_chat_js_type_checks_against_the_wire() -> None:
    done = _check(STATIC)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def _renamed(shape: Any, old: str, new: str) -> Any:
    fields = {new if k == old else k: v for k, v in get_type_hints(shape).items()}
    return TypedDict(shape.__name__, fields)  # type: ignore[operator]


def test_a_key_renamed_on_the_python_side_fails_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = {"ToolJSON": ("call_id", "call"), "ApproveMsg": ("approved", "ok")}
    declared = [
        (name, _renamed(shape, *planted[name]) if name in planted else shape) for name, shape in _wire_ts._DECLARED
    ]
    monkeypatch.setattr(_wire_ts, "_DECLARED", declared)
    for name in ("chat.js", "tsconfig.json"):
        shutil.copy(STATIC / name, tmp_path / name)
    (tmp_path / "wire.d.ts").write_text(_wire_ts.declarations(), encoding="utf-8")
    done = _check(tmp_path)
    assert done.returncode != 0
    # chat.js reads the tool card's old key, and sends the approval with the old key.
    assert "Property 'call_id' does not exist on type 'ToolJSON'" in done.stdout, done.stdout
    assert "'approved' does not exist in type 'ApproveMsg'" in done.stdout, done.stdout
