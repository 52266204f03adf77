"""A namespace summed up so two kernels can be compared: each user name's type, shape or length,
and a content digest where one can be computed within a bound.

The same function runs in the live kernel and in the fresh one that reran the notebook, so the
two summaries are comparable field by field. Digests: pandas objects through
`pandas.util.hash_pandas_object`, numpy arrays by their bytes, built-in values (numbers, text,
lists, dicts, sets, tuples) by their pickled bytes (sets sorted first: their order depends on
the process's hash seed). Anything else is compared by type and shape only, and says so.
Bounded: a value over `MAX_DIGEST_BYTES` is not digested, and once `BUDGET_S` of digesting is
spent the remaining names are summed up without one. Nothing here imports pandas or numpy.
"""

from __future__ import annotations

import hashlib
import pickle
import sys
import time
import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["BUDGET_S", "MAX_DIGEST_BYTES", "VarDiff", "VarSummary", "compare", "dump", "summarize", "user_names"]

MAX_DIGEST_BYTES = 64_000_000
"""Values larger than this (bytes of data, or pickled) are compared by type and shape only."""
BUDGET_S = 5.0
"""Seconds of digesting per namespace; the names after that get no digest."""
_MAX_ITEMS = 200_000
_IPYTHON = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})
_SKIP = (types.ModuleType,)
_PLAIN = (int, float, complex, str, bytes, bool, type(None))
_CONTAINERS = (list, tuple, dict, set, frozenset)
_CODE = "code: compared by name and type"


@dataclass(frozen=True, slots=True)
class VarSummary:
    """One name of a namespace, summed up."""

    type: str
    """`module.QualName` of the value's type (`builtins.` left out)."""
    shape: tuple[int, ...] | None = None
    length: int | None = None
    digest: str | None = None
    """A content digest, or None (`why` says why)."""
    why: str | None = None
    """Why there is no digest (`no digest for this type`, `over 64 MB`, `time budget spent`)."""

    def describe(self) -> str:
        """`DataFrame 10,000×12`, `list of 3`, `int`."""
        kind = self.type.rsplit(".", 1)[-1]
        if self.shape is not None:
            return f"{kind} {'×'.join(f'{d:,}' for d in self.shape)}"
        if self.length is not None:
            return f"{kind} of {self.length:,}"
        return kind

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VarSummary:
        """Read back `to_dict`."""
        shape = data.get("shape")
        return cls(
            str(data.get("type", "?")),
            tuple(int(d) for d in shape) if isinstance(shape, list) else None,
            data.get("length") if isinstance(data.get("length"), int) else None,
            data.get("digest") if isinstance(data.get("digest"), str) else None,
            data.get("why") if isinstance(data.get("why"), str) else None,
        )


def user_names(ns: Mapping[str, Any]) -> list[str]:
    """The names compared: not `_`-private, not IPython's plumbing, not modules."""
    return sorted(
        n for n, v in list(ns.items()) if not n.startswith("_") and n not in _IPYTHON and not isinstance(v, _SKIP)
    )


def summarize(
    ns: Mapping[str, Any], *, budget_s: float = BUDGET_S, max_bytes: int = MAX_DIGEST_BYTES
) -> dict[str, VarSummary]:
    """Every user name of `ns`, summed up (see the module docstring for the bounds)."""
    deadline = time.monotonic() + budget_s
    out: dict[str, VarSummary] = {}
    for name in user_names(ns):
        value = ns[name]
        if time.monotonic() > deadline:
            out[name] = _summary(value, None, "time budget spent")
            continue
        try:
            digest, why = _digest(value, max_bytes)
        except Exception as exc:  # noqa: BLE001 - a value that cannot be read is compared by type
            digest, why = None, f"digest failed ({type(exc).__name__})"
        out[name] = _summary(value, digest, why)
    return out


def dump(ns: Mapping[str, Any], path: str) -> None:
    """Write `summarize(ns)` as JSON to `path` (the rerun's last, added cell calls it)."""
    import json

    with open(path, "w", encoding="utf-8") as f:
        json.dump({k: v.to_dict() for k, v in summarize(ns).items()}, f)


def _summary(value: Any, digest: str | None, why: str | None) -> VarSummary:
    t = type(value)
    name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    shape = getattr(value, "shape", None) if not isinstance(value, type) else None
    if not (isinstance(shape, tuple) and all(isinstance(d, int) for d in shape)):
        shape = None
    length = len(value) if shape is None and isinstance(value, (str, bytes, *_CONTAINERS)) else None
    return VarSummary(name, shape, length, digest, why)


def _digest(value: Any, max_bytes: int) -> tuple[str | None, str | None]:
    module = type(value).__module__.split(".", 1)[0]
    if module == "pandas" and "pandas" in sys.modules:
        return _pandas(value, max_bytes)
    if module == "numpy" and hasattr(value, "tobytes") and hasattr(value, "nbytes"):
        if value.nbytes > max_bytes:
            return None, f"over {max_bytes // 1_000_000} MB"
        if value.dtype.hasobject:
            return _pickled(value.tolist(), max_bytes)
        return _sha(repr((str(value.dtype), value.shape)).encode(), value.tobytes()), None
    if isinstance(value, _PLAIN) or (isinstance(value, _CONTAINERS) and _plain_tree(value)):
        return _pickled(_canonical(value), max_bytes)
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return None, _CODE
    return None, "no digest for this type"


def _pandas(value: Any, max_bytes: int) -> tuple[str | None, str | None]:
    import pandas as pd

    if not isinstance(value, (pd.DataFrame, pd.Series, pd.Index)):
        return None, "no digest for this type"
    if int(value.memory_usage(deep=False).sum() if hasattr(value, "columns") else value.memory_usage()) > max_bytes:
        return None, f"over {max_bytes // 1_000_000} MB"
    hashed = pd.util.hash_pandas_object(value, index=not isinstance(value, pd.Index))
    head = repr((list(map(str, getattr(value, "columns", []))), str(getattr(value, "dtypes", value.dtype))))
    return _sha(head.encode(), hashed.to_numpy().tobytes()), None


def _plain_tree(value: Any, depth: int = 0) -> bool:
    """Whether a container holds only plain values and containers of them (bounded)."""
    if depth > 20:
        return False
    items = list(value.items()) if isinstance(value, dict) else value
    if len(items) > _MAX_ITEMS:
        return False
    for item in items:
        for part in item if isinstance(value, dict) else (item,):
            if isinstance(part, _CONTAINERS):
                if not _plain_tree(part, depth + 1):
                    return False
            elif not isinstance(part, _PLAIN):
                return False
    return True


def _canonical(value: Any) -> Any:
    """Sets in a stable order (their iteration order follows the process's hash seed)."""
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted((_canonical(v) for v in value), key=repr))
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_canonical(v) for v in value)
    return value


def _pickled(value: Any, max_bytes: int) -> tuple[str | None, str | None]:
    data = pickle.dumps(value, protocol=5)
    if len(data) > max_bytes:
        return None, f"over {max_bytes // 1_000_000} MB"
    return _sha(data), None


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class VarDiff:
    """One way the live namespace and the rerun's differ."""

    name: str
    kind: str
    """`missing` (live only: the rerun lacks it), `extra` (the rerun only), `type`, `shape`,
    `length` or `content` (same type and shape, a different digest)."""
    live: VarSummary | None
    fresh: VarSummary | None

    def text(self) -> str:
        """`df` has 9,812 rows live, 10,000 when the notebook reruns (the first half of a line)."""
        n = f"`{self.name}`"
        live, fresh = self.live, self.fresh
        if self.kind == "missing" and live is not None:
            return f"{n} ({live.describe()}) exists live but not when the notebook reruns"
        if self.kind == "extra" and fresh is not None:
            return f"{n} ({fresh.describe()}) exists when the notebook reruns but not live"
        assert live is not None and fresh is not None
        if self.kind == "shape" and live.shape and fresh.shape and len(live.shape) == len(fresh.shape) == 2:
            if live.shape[1] == fresh.shape[1]:
                return f"{n} has {live.shape[0]:,} rows live, {fresh.shape[0]:,} when the notebook reruns"
        if self.kind == "content":
            return f"{n} ({live.describe()}) holds different values live than when the notebook reruns"
        return f"{n} is {live.describe()} live, {fresh.describe()} when the notebook reruns"


def compare(live: Mapping[str, VarSummary], fresh: Mapping[str, VarSummary]) -> tuple[list[VarDiff], list[str]]:
    """The differences, and the names compared by type and shape only (no digest on one side)."""
    diffs: list[VarDiff] = []
    undigested: list[str] = []
    for name in sorted(live.keys() | fresh.keys()):
        a, b = live.get(name), fresh.get(name)
        if b is None:
            diffs.append(VarDiff(name, "missing", a, None))
        elif a is None:
            diffs.append(VarDiff(name, "extra", None, b))
        elif a.type != b.type:
            diffs.append(VarDiff(name, "type", a, b))
        elif a.shape != b.shape:
            diffs.append(VarDiff(name, "shape", a, b))
        elif a.length != b.length:
            diffs.append(VarDiff(name, "length", a, b))
        elif a.digest is None or b.digest is None:
            if a.why != _CODE:  # a function or class: its name and type are all there is to compare
                undigested.append(name)
        elif a.digest != b.digest:
            diffs.append(VarDiff(name, "content", a, b))
    return diffs, undigested
