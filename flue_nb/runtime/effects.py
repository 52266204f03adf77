"""What one tool call changed, as typed records: the one format from the tools to undo, rewind,
review and verify.

A tool call's `Effects` is kept durably beside its step: in the stored result's `details` under
`"effects"` (`Effects.to_dict()`), so it is committed in the same transaction as the result the
model sees. Old values and old file contents live in the store's content-addressed blobs, framed
by `frame_blob` so that an effect's blob never shares a digest with an image (and dropping it
for the conversation's cap can never take an image away).

Records:
- `VariableEffect`: a namespace name the `python` tool created, changed or deleted; `before` /
  `after` summarise the values (type, shape or length, a digest within `Bounds.digest_bytes`);
  `kept` is the blob of the pickled old value, `not_kept` says why there is none.
- `FileEffect`: a workspace file `write`, `edit` or `bash` created, changed or deleted, with
  sha256 digests before and after and the blob of its previous content (`kept`).
- `CellEffect`: a notebook cell a notebook tool inserted, edited, deleted, moved or ran, with its
  source before and after.
- `Effects`: one call's lists, plus what did not fit (`omitted`, named) and the bash scan's cut
  (`scan_cut`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

__all__ = [
    "BLOB_MAGIC",
    "EFFECTS_KEY",
    "Bounds",
    "CellAction",
    "CellEffect",
    "Effects",
    "FileAction",
    "FileEffect",
    "ValueSummary",
    "VariableAction",
    "VariableEffect",
    "frame_blob",
    "unframe_blob",
]

EFFECTS_KEY = "effects"
"""The key of a stored tool result's `details` that holds its `Effects.to_dict()`."""
BLOB_MAGIC = b"flue-effect-v1\n"
"""The first bytes of every effect blob (`frame_blob`): a pickled value or a file's old bytes."""

VariableAction = Literal["created", "changed", "deleted"]
FileAction = Literal["created", "changed", "deleted"]
CellAction = Literal["inserted", "edited", "deleted", "moved", "ran"]


@dataclass(frozen=True, slots=True)
class Bounds:
    """What recording may keep: old values and file contents, per step and per conversation.

    Over `step_bytes` a step keeps no more old values (they are named in `not_kept` instead);
    over `conversation_bytes` the conversation's oldest kept blobs are dropped first (their
    records stay; an undo then says the value is no longer kept).
    """

    value_bytes: int = 64 * 2**20
    """The largest single old value (pickled) or old file content kept."""
    step_bytes: int = 128 * 2**20
    """All old values and file contents one tool call keeps."""
    conversation_bytes: int = 512 * 2**20
    """All that one conversation keeps; the oldest are dropped first beyond it."""
    digest_bytes: int = 16 * 2**20
    """Values larger than this (estimated) get type and shape only, no content digest."""
    items: int = 200
    """Effects one call records in detail; the rest are named in `omitted`."""
    scan_files: int = 5_000
    """Files the `bash` scan looks at before and after a command; beyond, the scan is cut."""
    scan_seconds: float = 0.25
    """Time the `bash` scan may take on each side of a command; beyond, it is cut."""
    scan_keep_bytes: int = 256 * 1024
    """Files up to this size have their content read before a `bash` command, so a change can
    be undone; bigger ones get digests only when they are small enough to hash (`digest_bytes`)."""
    scan_keep_total: int = 16 * 2**20
    """All file content the `bash` scan reads ahead of a command."""

    def to_dict(self) -> dict[str, Any]:
        """The bounds as stated in a record (so a reader knows what was promised)."""
        return {
            "value_bytes": self.value_bytes,
            "step_bytes": self.step_bytes,
            "conversation_bytes": self.conversation_bytes,
            "digest_bytes": self.digest_bytes,
            "items": self.items,
        }


@dataclass(frozen=True, slots=True)
class ValueSummary:
    """A value as a record keeps it: type, shape or length, and a content digest when computed."""

    type: str
    shape: tuple[int, ...] | None = None
    length: int | None = None
    digest: str | None = None
    """sha256 of the pickled value (or of a pandas/numpy object's content); None over the bound
    or when it cannot be computed."""

    def describe(self) -> str:
        """`DataFrame 10,000×12`, `list len 4`, `int`."""
        if self.shape is not None:
            return f"{self.type} {'×'.join(f'{d:,}' for d in self.shape)}"
        if self.length is not None:
            return f"{self.type} len {self.length:,}"
        return self.type

    def to_dict(self) -> dict[str, Any]:
        """JSON form: unset keys left out."""
        out: dict[str, Any] = {"type": self.type}
        if self.shape is not None:
            out["shape"] = list(self.shape)
        if self.length is not None:
            out["length"] = self.length
        if self.digest is not None:
            out["digest"] = self.digest
        return out

    @classmethod
    def from_dict(cls, data: Any) -> ValueSummary | None:
        """The summary a stored dict holds; None for anything else."""
        if not isinstance(data, Mapping) or not isinstance(data.get("type"), str):
            return None
        shape = data.get("shape")
        length = data.get("length")
        return cls(
            data["type"],
            tuple(int(d) for d in shape) if isinstance(shape, Sequence) and not isinstance(shape, str) else None,
            int(length) if isinstance(length, int) else None,
            str(data["digest"]) if data.get("digest") else None,
        )


@dataclass(frozen=True, slots=True)
class VariableEffect:
    """One namespace name a call created, changed or deleted."""

    name: str
    action: VariableAction
    before: ValueSummary | None = None
    """The old value (None for `created`)."""
    after: ValueSummary | None = None
    """The new value (None for `deleted`)."""
    kept: str | None = None
    """Digest of the blob holding the pickled old value (`frame_blob`), when it was kept."""
    not_kept: str | None = None
    """Why the old value of a changed or deleted name was not kept (e.g. "over the 64 MiB cap",
    "cannot be pickled: socket", "not captured: changed by code the call's text did not show")."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        out: dict[str, Any] = {"name": self.name, "action": self.action}
        if self.before is not None:
            out["before"] = self.before.to_dict()
        if self.after is not None:
            out["after"] = self.after.to_dict()
        if self.kept is not None:
            out["kept"] = self.kept
        if self.not_kept is not None:
            out["not_kept"] = self.not_kept
        return out

    @classmethod
    def from_dict(cls, data: Any) -> VariableEffect | None:
        """The effect a stored dict holds; None for anything else."""
        if not isinstance(data, Mapping) or data.get("action") not in get_args(VariableAction):
            return None
        return cls(
            str(data.get("name")),
            data["action"],
            ValueSummary.from_dict(data.get("before")),
            ValueSummary.from_dict(data.get("after")),
            _opt(data.get("kept")),
            _opt(data.get("not_kept")),
        )


@dataclass(frozen=True, slots=True)
class FileEffect:
    """One workspace file a call created, changed or deleted."""

    path: str
    """Absolute path."""
    action: FileAction
    before: str | None = None
    """sha256 of the old content (None for `created`, or when not computed)."""
    after: str | None = None
    """sha256 of the new content (None for `deleted`, or when not computed)."""
    size_before: int | None = None
    size_after: int | None = None
    kept: str | None = None
    """Digest of the blob holding the old content (`frame_blob`), when it was kept."""
    not_kept: str | None = None
    """Why the old content of a changed or deleted file was not kept."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        out: dict[str, Any] = {"path": self.path, "action": self.action}
        for key in ("before", "after", "size_before", "size_after", "kept", "not_kept"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: Any) -> FileEffect | None:
        """The effect a stored dict holds; None for anything else."""
        if not isinstance(data, Mapping) or data.get("action") not in get_args(FileAction):
            return None
        return cls(
            str(data.get("path")),
            data["action"],
            _opt(data.get("before")),
            _opt(data.get("after")),
            _int(data.get("size_before")),
            _int(data.get("size_after")),
            _opt(data.get("kept")),
            _opt(data.get("not_kept")),
        )


@dataclass(frozen=True, slots=True)
class CellEffect:
    """One notebook cell a notebook tool inserted, edited, deleted, moved or ran."""

    action: CellAction
    cell_id: str | None = None
    notebook: str | None = None
    """The notebook's path, where the tool knew it."""
    cell_type: str | None = None
    index_before: int | None = None
    index_after: int | None = None
    source_before: str | None = None
    source_after: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        out: dict[str, Any] = {"action": self.action}
        for key in (
            "cell_id", "notebook", "cell_type", "index_before", "index_after", "source_before", "source_after",
        ):  # fmt: skip
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: Any) -> CellEffect | None:
        """The effect a stored dict holds; None for anything else."""
        if not isinstance(data, Mapping) or data.get("action") not in get_args(CellAction):
            return None
        return cls(
            data["action"],
            _opt(data.get("cell_id")),
            _opt(data.get("notebook")),
            _opt(data.get("cell_type")),
            _int(data.get("index_before")),
            _int(data.get("index_after")),
            data.get("source_before") if isinstance(data.get("source_before"), str) else None,
            data.get("source_after") if isinstance(data.get("source_after"), str) else None,
        )


@dataclass(frozen=True, slots=True)
class Effects:
    """Everything one tool call changed, as recorded."""

    variables: tuple[VariableEffect, ...] = ()
    files: tuple[FileEffect, ...] = ()
    cells: tuple[CellEffect, ...] = ()
    omitted: tuple[str, ...] = ()
    """Names and paths that changed but did not fit the record (`Bounds.items`)."""
    scan_cut: str | None = None
    """Why the `bash` scan of the workspace was cut (files after the cut are not recorded)."""
    bounds: dict[str, Any] = field(default_factory=dict)
    """The `Bounds.to_dict()` the call was recorded under."""
    kept_bytes: dict[str, int] = field(default_factory=dict)
    """Size of each blob the record keeps (digest -> bytes), for the conversation's cap."""

    def __bool__(self) -> bool:
        return bool(self.variables or self.files or self.cells or self.omitted or self.scan_cut)

    def blobs(self) -> list[str]:
        """Digests of the blobs this record refers to."""
        kept = [v.kept for v in self.variables] + [f.kept for f in self.files]
        return [k for k in kept if k is not None]

    def to_dict(self) -> dict[str, Any]:
        """The stored shape (`details["effects"]`)."""
        out: dict[str, Any] = {}
        if self.variables:
            out["variables"] = [v.to_dict() for v in self.variables]
        if self.files:
            out["files"] = [f.to_dict() for f in self.files]
        if self.cells:
            out["cells"] = [c.to_dict() for c in self.cells]
        if self.omitted:
            out["omitted"] = list(self.omitted)
        if self.scan_cut:
            out["scan_cut"] = self.scan_cut
        if self.bounds:
            out["bounds"] = dict(self.bounds)
        if self.kept_bytes:
            out["kept_bytes"] = dict(self.kept_bytes)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Effects | None:
        """The effects a stored dict holds; None when it holds none."""
        if not isinstance(data, Mapping):
            return None
        variables = tuple(v for v in map(VariableEffect.from_dict, _seq(data.get("variables"))) if v is not None)
        files = tuple(f for f in map(FileEffect.from_dict, _seq(data.get("files"))) if f is not None)
        cells = tuple(c for c in map(CellEffect.from_dict, _seq(data.get("cells"))) if c is not None)
        omitted = tuple(str(o) for o in _seq(data.get("omitted")))
        bounds = data.get("bounds")
        sizes = data.get("kept_bytes")
        return cls(
            variables,
            files,
            cells,
            omitted,
            _opt(data.get("scan_cut")),
            dict(bounds) if isinstance(bounds, Mapping) else {},
            {str(k): int(v) for k, v in sizes.items() if isinstance(v, int)} if isinstance(sizes, Mapping) else {},
        )

    @classmethod
    def from_details(cls, details: Mapping[str, Any] | None) -> Effects | None:
        """The effects kept in a stored tool result's `details`; None when it has none."""
        if not details:
            return None
        return cls.from_dict(details.get(EFFECTS_KEY))

    def merged(self, other: Effects) -> Effects:
        """This record and `other` as one (a tool recording two kinds of effect)."""
        return Effects(
            self.variables + other.variables,
            self.files + other.files,
            self.cells + other.cells,
            self.omitted + other.omitted,
            "; ".join(x for x in (self.scan_cut, other.scan_cut) if x) or None,
            self.bounds or other.bounds,
            {**self.kept_bytes, **other.kept_bytes},
        )


def frame_blob(payload: bytes) -> tuple[str, bytes]:
    """The digest and bytes to keep `payload` (a pickled value, a file's bytes) as an effect blob."""
    data = BLOB_MAGIC + payload
    return hashlib.sha256(data).hexdigest(), data


def unframe_blob(data: bytes) -> bytes | None:
    """The payload of an effect blob; None for bytes that are not one."""
    return data[len(BLOB_MAGIC) :] if data.startswith(BLOB_MAGIC) else None


def _opt(value: Any) -> str | None:
    return str(value) if value is not None and value != "" else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seq(value: Any) -> Sequence[Any]:
    return value if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else ()
