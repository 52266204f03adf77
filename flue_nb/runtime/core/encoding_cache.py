"""The tokenizer's ranks kept in a cache file, so a process's first count is cheaper.

tiktoken builds an encoding from its ranks file by decoding 100,256 base64 lines (~0.16 CPU-s
here) before the Rust side builds its tables (~0.1 s); every kernel that runs a `%flue` cell and
every `flue-nb` process paid both. The decoded ranks are written once, with `marshal`, under the
user's cache dir and read back by later processes in ~0.02 s. The file's name is a digest of
everything that could change the ranks: the encoding's name, tiktoken's version, the module that
registers the encoding and the data files beside it (path, size, time), Python's marshal version.
A cache that cannot be read, written or trusted is passed over: tiktoken loads as it always did.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from flue_nb.runtime.cache import cache_dir

__all__ = ["load_encoding"]

_KEYS = ("name", "pat_str", "mergeable_ranks", "special_tokens")
# One encoding per name and process, as tiktoken's own `get_encoding` keeps them.
_LOADED: dict[str, Any] = {}


def load_encoding(name: str) -> Any:
    """tiktoken's encoding `name`, its ranks read from the cache when a good copy is there."""
    import tiktoken

    if name in _LOADED:
        return _LOADED[name]
    encoding = _load(name, tiktoken)
    _LOADED[name] = encoding
    return encoding


def _load(name: str, tiktoken: Any) -> Any:
    path = _cache_file(name, tiktoken)
    params = _read(path) if path is not None else None
    if params is not None:
        try:
            return tiktoken.Encoding(**params)
        except (TypeError, ValueError):  # ranks tiktoken refuses: load as if there were no cache
            pass
    encoding = tiktoken.get_encoding(name)
    if path is not None:
        _write(path, encoding)
    return encoding


def _cache_file(name: str, tiktoken: Any) -> Path | None:
    """The cache file for `name` as installed now, or None when what registers it is unknown."""
    from tiktoken import registry

    tiktoken.list_encoding_names()  # finds the plugins that register encodings
    constructor = (registry.ENCODING_CONSTRUCTORS or {}).get(name)
    module = sys.modules.get(getattr(constructor, "__module__", ""))
    source = getattr(module, "__file__", None)
    if source is None:
        return None
    parts = [name, str(getattr(tiktoken, "__version__", "")), str(marshal.version)]
    data = Path(source).parent / "data"
    try:
        for file in [Path(source), *(sorted(data.iterdir()) if data.is_dir() else [])]:
            st = file.stat()
            parts.append(f"{file}:{st.st_size}:{st.st_mtime_ns}")
    except OSError:
        return None
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]
    return cache_dir() / f"tiktoken-{name}-{digest}.marshal"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        params = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    ok = (
        isinstance(params, dict)
        and sorted(params) == sorted(_KEYS)
        and isinstance(params["mergeable_ranks"], dict)
        and isinstance(params["special_tokens"], dict)
        and isinstance(params["pat_str"], str)
    )
    return params if ok else None


def _write(path: Path, encoding: Any) -> None:
    try:
        params = {key: getattr(encoding, key if key == "name" else f"_{key}") for key in _KEYS}
        blob = marshal.dumps(params)
    except (AttributeError, ValueError):  # a tiktoken whose Encoding keeps them otherwise
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole beside it, then renamed: a process reading meanwhile sees the old file
        # or the new one, never half of one.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # no cache this time; the next process tries again
