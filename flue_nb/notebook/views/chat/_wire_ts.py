"""The wire's TypeScript declarations (`wire.d.ts`), written from the TypedDicts in `wire`.

`chat.js` names these types in its JSDoc and `tsc --checkJs` checks it against them, so a key
renamed or retyped on the Python side fails the check (tests/notebook/test_wire_types.py, which
also checks the committed file is what `declarations()` writes now). Regenerate it with
`python -m flue_nb.notebook.views.chat._wire_ts`. The TypeScript names are the Python names.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from flue_nb.notebook.views.chat import wire

__all__ = ["PATH", "declarations"]

PATH = Path(__file__).resolve().parent / "wire.d.ts"

_DECLARED: list[tuple[str, Any]] = [
    ("ClipJSON", wire.ClipJSON),
    ("CodeJSON", wire.CodeJSON),
    ("ImageJSON", wire.ImageJSON),
    ("NamespaceJSON", wire.NamespaceJSON),
    ("ApprovalJSON", wire.ApprovalJSON),
    ("TextJSON", wire.TextJSON),
    ("ToolJSON", wire.ToolJSON),
    ("TaskJSON", wire.TaskJSON),
    ("SignalJSON", wire.SignalJSON),
    ("CompactionJSON", wire.CompactionJSON),
    ("NoteJSON", wire.NoteJSON),
    ("UserJSON", wire.UserJSON),
    ("PartJSON", wire.PartJSON),
    ("ErrorJSON", wire.ErrorJSON),
    ("BlockJSON", wire.BlockJSON),
    ("UsageJSON", wire.UsageJSON),
    ("StatusJSON", wire.StatusJSON),
    ("ChangeItemJSON", wire.ChangeItemJSON),
    ("OfferJSON", wire.OfferJSON),
    ("ChangesJSON", wire.ChangesJSON),
    ("Traits", wire.Traits),
    ("VendorTraits", wire.VendorTraits),
    ("SendMsg", wire.SendMsg),
    ("StopMsg", wire.StopMsg),
    ("ApproveMsg", wire.ApproveMsg),
    ("OlderMsg", wire.OlderMsg),
    ("UndoMsg", wire.UndoMsg),
    ("KeepMsg", wire.KeepMsg),
    ("RewindMsg", wire.RewindMsg),
    ("BrowserMsg", wire.BrowserMsg),
    ("BeatMsg", wire.BeatMsg),
    ("KernelMsg", wire.KernelMsg),
    ("StopRequest", wire.StopRequest),
    ("StopReply", wire.StopReply),
]
"""Every declared shape, in the order written (a union alias by its name, as `wire` has it)."""

_SCALARS: dict[Any, str] = {str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _ts(tp: Any, aliases: dict[frozenset[Any], str]) -> str:
    if tp in _SCALARS:
        return _SCALARS[tp]
    if is_typeddict(tp):
        return str(tp.__name__)
    origin, args = get_origin(tp), get_args(tp)
    if _is_union(tp):
        named = aliases.get(frozenset(args))
        return named if named is not None else " | ".join(_ts(a, aliases) for a in args)
    if origin is Literal:
        return " | ".join(f'"{a}"' for a in args)
    if origin is list:
        inner = _ts(args[0], aliases)
        return f"({inner})[]" if " | " in inner else f"{inner}[]"
    if origin is dict and args[0] is str:
        return f"Record<string, {_ts(args[1], aliases)}>"
    raise TypeError(f"the wire has no TypeScript for {tp!r}: declare it with JSON types")


def _doc(text: str | None, indent: str = "") -> list[str]:
    if not text:
        return []
    lines = [line.strip() for line in text.strip().splitlines()]
    if len(lines) == 1:
        return [f"{indent}/** {lines[0]} */"]
    return [f"{indent}/**", *(f"{indent} * {line}" if line else f"{indent} *" for line in lines), f"{indent} */"]


def declarations() -> str:
    """`wire.d.ts` as the TypedDicts in `wire` declare the wire now."""
    aliases = {frozenset(get_args(tp)): name for name, tp in _DECLARED if _is_union(tp)}
    out = [
        "// The chat widget's wire: generated from flue_nb/notebook/views/chat/wire.py by",
        "// `python -m flue_nb.notebook.views.chat._wire_ts`. Do not edit; change the TypedDicts and regenerate.",
    ]
    for name, tp in _DECLARED:
        out.append("")
        if is_typeddict(tp) and tp.__name__ == name:
            out += _doc(tp.__doc__)
            out.append(f"export interface {name} {{")
            hints = get_type_hints(tp)
            for key, value in hints.items():
                optional = "?" if key in tp.__optional_keys__ else ""
                out.append(f"  {key}{optional}: {_ts(value, aliases)};")
            out.append("}")
        else:
            members = get_args(tp) if _is_union(tp) else (tp,)
            out.append(f"export type {name} = {' | '.join(_ts(m, {}) for m in members)};")
    return "\n".join(out) + "\n"


def _main() -> int:
    PATH.write_text(declarations(), encoding="utf-8")
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
