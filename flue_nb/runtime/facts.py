"""What a tool call's end tells observers besides its text, as typed values: how its approval was
decided (`ApprovalFacts`) and which names the code changed (`NamespaceDiff`).

Each is one value from the tool to every view: `ToolOutput`, `ToolResultMessage` and `ToolEnd`
carry it as a field, and the store keeps it in the result's `details` under the keys it always
had (`approval`, `variables`), so rows written before these types existed read back the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = ["ApprovalFacts", "ApprovalReason", "NamespaceDiff", "join_details", "split_details"]

ApprovalReason = Literal["approved", "declined", "policy", "allowed", "headless", "unanswered", "ended"]
"""How a call was decided: `approved` / `declined` by a person, refused by the `deny` `policy`,
run without asking because a rule says so (`allowed`: a tool or pattern rule, or a grant of the
conversation), left to the fallback with no approver (`headless`) or no one answering
(`unanswered`), or `ended`: a request that closed without an answer (a view's word until the
result comes)."""

_APPROVAL = "approval"
_VARIABLES = "variables"


@dataclass(frozen=True, slots=True)
class ApprovalFacts:
    """How one tool call's approval was decided: the one shape from the approval policy to a card."""

    reason: ApprovalReason
    approved: bool | None = None
    """Whether the call ran; None for a request that `ended` before its call's result."""
    policy: Literal["allow", "ask", "deny"] | None = None
    """The mode that applied (None in a view's word on a request another kernel asked)."""
    fallback: Literal["allow", "deny"] | None = None
    """The fallback that decided, for `headless` and `unanswered`."""
    by: str | None = None
    """Where it was answered (`ballot.here()` of the kernel that closed the request), when the
    request was recorded so that another view could have answered it."""
    detail: str | None = None
    """Why a request `ended`."""
    rule: str | None = None
    """The rule that made the decision (`bash: 'git status' -> allow`, `default: ask`, `runs code
    later: ...`); None in rows written before rules existed."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON kept in the store (`details["approval"]`) and sent to a chat: unset keys left out."""
        out: dict[str, Any] = {}
        for key in ("policy", "approved", "reason", "fallback", "by", "detail", "rule"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: Any) -> ApprovalFacts | None:
        """The facts a stored `details["approval"]` holds (any row, old ones with `via` too); None if none."""
        if not isinstance(data, Mapping) or data.get("reason") not in get_args(ApprovalReason):
            return None
        approved, policy, fallback = data.get("approved"), data.get("policy"), data.get("fallback")
        return cls(
            data["reason"],
            approved if isinstance(approved, bool) else None,
            policy if policy in ("allow", "ask", "deny") else None,
            fallback if fallback in ("allow", "deny") else None,
            str(data["by"]) if data.get("by") else None,
            str(data["detail"]) if data.get("detail") is not None else None,
            str(data["rule"]) if data.get("rule") else None,
        )


@dataclass(frozen=True, slots=True)
class NamespaceDiff:
    """The names a run of code added, changed and removed in the namespace it ran in (`python`)."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, list[str]]:
        """The stored shape (`details["variables"]`)."""
        return {"created": list(self.added), "changed": list(self.changed), "deleted": list(self.removed)}

    @classmethod
    def from_dict(cls, data: Any) -> NamespaceDiff | None:
        """The diff a stored `details["variables"]` holds; None when it holds none."""
        if not isinstance(data, Mapping) or not any(k in data for k in ("created", "changed", "deleted")):
            return None
        return cls(_names(data.get("created")), _names(data.get("changed")), _names(data.get("deleted")))


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, Mapping):
        return tuple(str(k) for k in value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(str(v) for v in value)
    return ()


def split_details(
    details: Mapping[str, Any] | None,
) -> tuple[dict[str, Any] | None, ApprovalFacts | None, NamespaceDiff | None]:
    """A stored result's `details` as the tool's own extra and the typed facts kept inside it."""
    if not details:
        return None, None, None
    approval = ApprovalFacts.from_dict(details.get(_APPROVAL))
    namespace = NamespaceDiff.from_dict(details.get(_VARIABLES))
    rest = {
        k: v
        for k, v in details.items()
        if not (k == _APPROVAL and approval is not None) and not (k == _VARIABLES and namespace is not None)
    }
    return rest or None, approval, namespace


def join_details(
    details: Mapping[str, Any] | None, approval: ApprovalFacts | None, namespace: NamespaceDiff | None
) -> dict[str, Any] | None:
    """The `details` a result is stored with: the tool's own extra plus the typed facts."""
    out = dict(details or {})
    if namespace is not None:
        out[_VARIABLES] = namespace.to_dict()
    if approval is not None:
        out[_APPROVAL] = approval.to_dict()
    return out or None
