"""The user's namespace summarised for the `variables` tool: names, types, sizes, and a closer look
at DataFrames (pandas, polars) and arrays (numpy), which are inspected only when their library is
already imported (nothing here imports them). Modules, functions, classes and IPython's own names
are left out; describing never runs user code beyond `len`, `shape` and `repr` of small values.
Known secrets are redacted before any text is cut (`runtime.redact`), so a preview never ends in
the first characters of one.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from flue_nb.runtime.redact import redact, secret_values

__all__ = ["describe_all", "describe_one", "user_names"]

# IPython's plumbing and its output history: not the user's variables.
_IPYTHON = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})
_SKIP_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)
_REPR_CHARS = 120
_DETAIL_ROWS = 5
_DETAIL_CHARS = 20_000


def user_names(ns: dict[str, Any]) -> list[str]:
    """The names a person would call their variables, sorted."""
    out = []
    for name, value in list(ns.items()):
        if name.startswith("_") or name in _IPYTHON:
            continue
        if isinstance(value, _SKIP_TYPES):
            continue
        out.append(name)
    return sorted(out)


def describe_all(ns: dict[str, Any]) -> list[str]:
    """One line per user variable: `name: type, size — preview`."""
    return [f"{name}: {_summary(ns[name])}" for name in user_names(ns) if name in ns]


def describe_one(name: str, value: Any) -> str:
    """Everything worth knowing about one variable, bounded."""
    kind = _kind(value)
    if kind == "pandas":
        text = _pandas_detail(name, value)
    elif kind == "polars":
        text = _polars_detail(name, value)
    elif kind == "numpy":
        text = f"{name}: numpy.ndarray shape {value.shape}, dtype {value.dtype}, {value.nbytes:,} bytes\n"
        text += _safe_repr(value, _DETAIL_CHARS)
    else:
        size = _size(value)
        text = f"{name}: {_type_name(value)}{f', {size}' if size else ''}\n{_safe_repr(value, _DETAIL_CHARS)}"
    return _clip(text, _DETAIL_CHARS)


def _clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (ending in "…" when cut), redacted first."""
    if len(text) <= limit:
        return text
    text = redact(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kind(value: Any) -> str:
    module = type(value).__module__.split(".", 1)[0]
    if module == "pandas" and "pandas" in sys.modules:
        return "pandas" if hasattr(value, "dtypes") and hasattr(value, "columns") else "pandas-other"
    if module == "polars" and "polars" in sys.modules:
        return "polars" if hasattr(value, "schema") and hasattr(value, "columns") else "polars-other"
    if module == "numpy" and "numpy" in sys.modules and hasattr(value, "dtype") and hasattr(value, "shape"):
        return "numpy"
    return "other"


def _is_frame(value: Any) -> bool:
    return _kind(value) in ("pandas", "polars", "numpy")


def _summary(value: Any) -> str:
    try:
        kind = _kind(value)
        if kind == "pandas":
            rows, cols = value.shape
            mem = int(value.memory_usage(index=True, deep=False).sum())
            names = ", ".join(map(str, list(value.columns)[:10])) + (", …" if cols > 10 else "")
            return f"pandas.DataFrame {rows:,} rows × {cols} columns ({names}), {mem:,} bytes"
        if kind == "polars":
            rows, cols = value.shape
            names = ", ".join(map(str, value.columns[:10])) + (", …" if cols > 10 else "")
            return f"polars.DataFrame {rows:,} rows × {cols} columns ({names}), {int(value.estimated_size()):,} bytes"
        if kind == "numpy":
            return f"numpy.ndarray shape {value.shape}, dtype {value.dtype}"
        shape = getattr(value, "shape", None) if kind.endswith("-other") else None
        size = f"shape {tuple(shape)}" if isinstance(shape, tuple) else _size(value)
        preview = _safe_repr(value, _REPR_CHARS).replace("\n", " ")
        return f"{_type_name(value)}{f', {size}' if size else ''} = {preview}"
    except Exception as exc:  # noqa: BLE001 - one odd object must not hide the others
        return f"{_type_name(value)} (could not be described: {type(exc).__name__})"


def _pandas_detail(name: str, df: Any) -> str:
    rows, cols = df.shape
    mem = int(df.memory_usage(index=True, deep=True).sum())
    dtypes = "\n".join(f"  {col}: {dtype}" for col, dtype in list(df.dtypes.items())[:200])
    head = _redacted_frame(df.head(_DETAIL_ROWS)).to_string(max_cols=30, max_colwidth=60)
    return (
        f"{name}: pandas.DataFrame {rows:,} rows × {cols} columns, {mem:,} bytes (deep)\n"
        f"columns and dtypes:\n{dtypes}\nfirst {min(rows, _DETAIL_ROWS)} rows:\n{head}"
    )


def _polars_detail(name: str, df: Any) -> str:
    rows, cols = df.shape
    dtypes = "\n".join(f"  {col}: {dtype}" for col, dtype in list(df.schema.items())[:200])
    head = str(_redacted_polars(df.head(_DETAIL_ROWS)))
    return (
        f"{name}: polars.DataFrame {rows:,} rows × {cols} columns, {int(df.estimated_size()):,} bytes\n"
        f"columns and dtypes:\n{dtypes}\nfirst {min(rows, _DETAIL_ROWS)} rows:\n{head}"
    )


def _redacted_frame(head: Any) -> Any:
    """A pandas frame's first rows with secrets redacted in its text cells: `to_string` cuts each
    cell to a width, which would leave a secret's first characters."""
    pairs = secret_values()
    if not pairs:
        return head

    def clean(v: Any) -> Any:
        return redact(v, pairs) if isinstance(v, str) else v

    head = head.map(clean)
    head.columns = [clean(c) for c in head.columns]
    head.index = head.index.map(clean)
    return head


def _redacted_polars(head: Any) -> Any:
    """A polars frame's first rows with secrets redacted in its string columns (it cuts long
    strings when it prints them)."""
    pairs = secret_values()
    if not pairs:
        return head
    import polars as pl

    columns = [c for c, dtype in head.schema.items() if dtype == pl.String]
    for value, name in pairs:
        head = head.with_columns(
            [pl.col(c).str.replace_all(value, f"[redacted:{name}]", literal=True) for c in columns]
        )
    return head


def _size(value: Any) -> str:
    if isinstance(value, (str, bytes, bytearray, list, tuple, dict, set, frozenset)):
        return f"len {len(value):,}"
    return ""


def _type_name(value: Any) -> str:
    cls = type(value)
    module = cls.__module__
    return cls.__qualname__ if module in ("builtins", "__main__") else f"{module.split('.', 1)[0]}.{cls.__qualname__}"


def _safe_repr(value: Any, limit: int) -> str:
    if isinstance(value, (str, bytes)) and len(value) > limit:
        # Never build the repr of a huge string only to cut it; the margin keeps whole any secret
        # that starts before the cut, so it is redacted rather than cut.
        longest = max((len(v) for v, _ in secret_values()), default=0)
        value = value[: limit + longest]
    elif isinstance(value, (list, tuple, dict, set)) and len(value) > 1000:
        return f"<{type(value).__name__} of {len(value):,} items>"
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ is described, not raised
        return f"<repr failed: {type(exc).__name__}>"
    return _clip(text, limit)
