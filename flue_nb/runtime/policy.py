"""The hub policy: what an administrator lets every user of this installation do (issue 36.4).

A JSON or YAML file named by `$FLUE_POLICY`, else `flue_policy.json` (or `.yaml`/`.yml`) in a
Jupyter config dir (`jupyter_core.paths.jupyter_config_path()`, first found wins), read once per
process (the notebook extension reads it at load; any run reads it at its first model call):

    {"models": {"allow": ["anthropic/claude-*", "openai/gpt-5*"]},
     "approval": {"max": "ask"},
     "sandbox": {"require": true},
     "mcp": {"allow": ["npx -y @modelcontextprotocol/server-*", "https://mcp.example.com/*"]},
     "spend": {"per_user_per_day_usd": 5, "per_user_per_month_usd": 50},
     "user": {"env": "JUPYTERHUB_USER"}}

Every key is optional. A model outside `models.allow` is refused at every model call, an MCP
server outside `mcp.allow` when it would be mounted, and a call that would pass a spending limit
before it is made; each with `PolicyDeniedError` (`policy_denied`) naming the policy file.
`approval.max` caps every approval rule (`allow` becomes `ask` when it is `ask`) and
`sandbox.require` turns `sandbox="none"` into `"auto"`, each said once when it applies.

Spend is counted per user (the OS user, or the variable `user.env` names) per day and per
month (UTC), across kernels and notebooks, in the conversation's store (SQLite for one machine,
PostgreSQL for a team); a run without a store counts in this process only. Two kernels calling
at the very same moment can each pass the check before either has counted: the limit can be
overshot by what one call costs, per kernel.

The file must not be writable by the users' kernels for this to hold (a hub's admin-owned
`/etc/jupyter`, or `FLUE_POLICY` set in the spawner's environment): the policy is read by the
same process the agent's `python` tool runs in, so it is a guard against mistakes and runaway
spending, not against a user who deliberately edits their own process.
"""

from __future__ import annotations

import calendar
import fnmatch
import getpass
import os
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flue_nb.runtime.errors import ConfigError, PolicyDeniedError
from flue_nb.runtime.tools.rules import MODES, ApprovalRules, Mode, load_mapping

__all__ = [
    "HubPolicy",
    "Spent",
    "check_mcp_servers",
    "current_policy",
    "load_policy",
    "policy_path",
    "set_policy",
]

_NAMES = ("flue_policy.json", "flue_policy.yaml", "flue_policy.yml")
_UNSET: Any = object()
_current: Any = _UNSET
_lock = threading.Lock()
_local_spend: list[tuple[str, float, float]] = []
"""(user, at, usd) of calls counted without a store (this process only)."""
_said: set[str] = set()


@dataclass(frozen=True, slots=True)
class Spent:
    """What a user has spent today and this month (UTC), and what is left under the policy."""

    user: str
    day_usd: float
    month_usd: float
    day_left: float | None
    month_left: float | None


@dataclass(frozen=True)
class HubPolicy:
    """An administrator's policy (see the module's note for the file's shape)."""

    source: str
    models: tuple[str, ...] | None = None
    approval_max: Mode | None = None
    sandbox_require: bool = False
    mcp: tuple[str, ...] | None = None
    per_day_usd: float | None = None
    per_month_usd: float | None = None
    user_env: str | None = None

    @classmethod
    def parse(cls, data: Mapping[str, Any], source: str) -> HubPolicy:
        """A policy from the file's mapping; `ConfigError` naming the file for a bad value."""

        def section(name: str) -> Mapping[str, Any]:
            value = data.get(name) or {}
            if not isinstance(value, Mapping):
                raise ConfigError(f"hub policy {source}: `{name}` must be a mapping, got {value!r}")
            return value

        def globs(name: str) -> tuple[str, ...] | None:
            value = section(name).get("allow")
            if value is None:
                return None
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"hub policy {source}: `{name}.allow` must be a list of glob patterns")
            return tuple(value)

        def usd(name: str) -> float | None:
            value = section("spend").get(name)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"hub policy {source}: `spend.{name}` must be dollars >= 0, got {value!r}")
            return float(value)

        top = section("approval").get("max")
        if top is not None and top not in MODES:
            raise ConfigError(f"hub policy {source}: `approval.max` must be 'allow', 'ask' or 'deny', got {top!r}")
        env = section("user").get("env")
        return cls(
            source,
            globs("models"),
            top,
            bool(section("sandbox").get("require", False)),
            globs("mcp"),
            usd("per_user_per_day_usd"),
            usd("per_user_per_month_usd"),
            str(env) if env else None,
        )

    # --- who, and what --------------------------------------------------------------------------

    def user(self) -> str:
        """Whose spending is counted: the variable `user.env` names, else the OS user."""
        if self.user_env and os.environ.get(self.user_env):
            return os.environ[self.user_env]
        try:
            return getpass.getuser()
        except Exception:  # noqa: BLE001 - no passwd entry (a container's random uid)
            return str(os.getuid()) if hasattr(os, "getuid") else "unknown"

    def check_model(self, provider: str, model_id: str) -> None:
        """Refuse a model the policy does not list (`models.allow`)."""
        if self.models is None:
            return
        names = (f"{provider}/{model_id}", model_id)
        if any(fnmatch.fnmatchcase(n, p) for n in names for p in self.models):
            return
        raise PolicyDeniedError(
            f"policy_denied: the hub policy ({self.source}) does not allow model `{provider}/{model_id}`; "
            f"allowed: {', '.join(self.models) or 'none'}. Choose one of those, or ask your administrator.",
            policy=self.source,
            model=model_id,
        )

    def check_mcp(self, name: str, target: str) -> None:
        """Refuse an MCP server whose command line or URL the policy does not list (`mcp.allow`)."""
        if self.mcp is None or any(fnmatch.fnmatchcase(target, p) for p in self.mcp):
            return
        raise PolicyDeniedError(
            f"policy_denied: the hub policy ({self.source}) does not allow MCP server `{name}` "
            f"({target}); allowed: {', '.join(self.mcp) or 'none'}. Ask your administrator to add it.",
            policy=self.source,
            server=name,
        )

    def cap(self, rules: ApprovalRules) -> ApprovalRules:
        """`rules` under `approval.max`, saying once what that takes away."""
        if self.approval_max is None:
            return rules
        capped = rules.capped(self.approval_max, f"the hub policy ({self.source})")
        lost = capped.clamped()
        if lost:
            _say(
                f"flue: the hub policy ({self.source}) allows approval at most `{self.approval_max}`; "
                f"so {', '.join(lost)}"
            )
        return capped

    def sandbox_level(self, level: str) -> str:
        """`level`, or `auto` when the policy requires a sandbox and `level` is `none` (said once)."""
        if self.sandbox_require and level == "none":
            _say(f"flue: the hub policy ({self.source}) requires the shell sandbox; sandbox `none` -> `auto`")
            return "auto"
        return level

    # --- spending -------------------------------------------------------------------------------

    @property
    def limits_spend(self) -> bool:
        """Whether the policy sets a spending limit."""
        return self.per_day_usd is not None or self.per_month_usd is not None

    def spent(self, store: Any, now: float | None = None) -> Spent:
        """What this policy's user has spent today and this month, and what is left."""
        now = time.time() if now is None else now
        user = self.user()
        day_start, month_start = _periods(now)
        day = _spent(store, user, day_start)
        month = _spent(store, user, month_start)
        return Spent(
            user,
            day,
            month,
            None if self.per_day_usd is None else max(0.0, self.per_day_usd - day),
            None if self.per_month_usd is None else max(0.0, self.per_month_usd - month),
        )

    def room(self, store: Any, need_usd: float, now: float | None = None) -> float | None:
        """Dollars the user may still spend (None: no limit); `PolicyDeniedError` when a call
        needing `need_usd` (its prompt and the smallest answer) would pass a limit."""
        if not self.limits_spend:
            return None
        s = self.spent(store, now)
        lefts = [(left, what, limit) for left, what, limit in (
            (s.day_left, "daily", self.per_day_usd),
            (s.month_left, "monthly", self.per_month_usd),
        ) if left is not None]  # fmt: skip
        left, what, limit = min(lefts, key=lambda x: x[0])
        if need_usd > left:
            spent = s.day_usd if what == "daily" else s.month_usd
            raise PolicyDeniedError(
                f"policy_denied: user `{s.user}` has spent ${spent:.4f} of the ${limit:.2f} {what} limit set by "
                f"the hub policy ({self.source}); the next model call would need about ${need_usd:.4f} more. "
                "It resets at the start of the next "
                + ("day" if what == "daily" else "month")
                + " (UTC); ask your administrator for more.",
                policy=self.source,
                user=s.user,
                limit=f"per_user_per_{'day' if what == 'daily' else 'month'}_usd",
            )
        return left

    def count(self, store: Any, usd: float, now: float | None = None) -> None:
        """Count `usd` spent by this policy's user (in the store, else in this process)."""
        if usd <= 0 or not self.limits_spend:
            return
        now = time.time() if now is None else now
        if store is not None and hasattr(store, "add_spend"):
            store.add_spend(self.user(), usd, at=now)
        else:
            with _lock:
                _local_spend.append((self.user(), now, usd))

    def describe(self, store: Any = None) -> list[str]:
        """`%flue status`'s lines on the policy in force and what is left of the user's limits."""
        lines = [f"hub policy: {self.source}"]
        if self.models is not None:
            lines.append(f"  models allowed: {', '.join(self.models) or 'none'}")
        if self.approval_max is not None:
            lines.append(f"  approval at most: {self.approval_max}")
        if self.sandbox_require:
            lines.append("  shell sandbox: required")
        if self.mcp is not None:
            lines.append(f"  MCP servers allowed: {', '.join(self.mcp) or 'none'}")
        if self.limits_spend:
            try:
                s = self.spent(store)
            except Exception as exc:  # noqa: BLE001 - a store that cannot be read: say so, not fail
                lines.append(f"  spending: cannot be read ({type(exc).__name__}: {exc})")
                return lines
            if self.per_day_usd is not None:
                lines.append(
                    f"  spent today by {s.user}: ${s.day_usd:.4f} of ${self.per_day_usd:.2f} (${s.day_left:.4f} left)"
                )
            if self.per_month_usd is not None:
                lines.append(
                    f"  spent this month by {s.user}: ${s.month_usd:.4f} of ${self.per_month_usd:.2f} "
                    f"(${s.month_left:.4f} left)"
                )
        return lines


def _periods(now: float) -> tuple[float, float]:
    """The start of `now`'s UTC day and UTC month, in epoch seconds."""
    t = time.gmtime(now)
    day = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, 0))
    month = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, 0))
    return float(day), float(month)


def _spent(store: Any, user: str, since: float) -> float:
    if store is not None and hasattr(store, "spent"):
        return float(store.spent(user, since=since))
    with _lock:
        return sum(usd for who, at, usd in _local_spend if who == user and at >= since)


def _say(message: str) -> None:
    if message not in _said:
        _said.add(message)
        warnings.warn(message, UserWarning, stacklevel=3)


# --- finding and holding the policy ---------------------------------------------------------------


def policy_path() -> str | None:
    """The policy file in force: `$FLUE_POLICY`, else the first `flue_policy.*` in a Jupyter
    config dir; None when there is none."""
    named = os.environ.get("FLUE_POLICY")
    if named:
        return os.path.expanduser(named)
    try:
        from jupyter_core.paths import jupyter_config_path
    except ImportError:
        return None
    for d in jupyter_config_path():
        for name in _NAMES:
            path = os.path.join(d, name)
            if os.path.isfile(path):
                return path
    return None


def load_policy(path: str | None = None) -> HubPolicy | None:
    """The policy in `path` (default: `policy_path()`); None when there is none."""
    path = path if path is not None else policy_path()
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        # A named policy that cannot be read must not silently turn into no policy.
        raise ConfigError(f"hub policy {path} cannot be read: {exc.strerror or exc}") from None
    return HubPolicy.parse(load_mapping(text, path), path)


def current_policy() -> HubPolicy | None:
    """The policy of this process, read once (at the notebook extension's load or first use)."""
    global _current
    if _current is _UNSET:
        with _lock:
            if _current is _UNSET:
                _current = load_policy()
    policy: HubPolicy | None = _current
    return policy


def set_policy(policy: HubPolicy | None | str = "reload") -> HubPolicy | None:
    """Put `policy` in force (`"reload"`: read the file again); what is in force after."""
    global _current
    with _lock:
        _current = load_policy() if policy == "reload" else policy
        _said.clear()
    return current_policy()


def check_mcp_servers(servers: Sequence[Any]) -> None:
    """Refuse the MCP servers the policy does not allow, before any of them is started."""
    policy = current_policy()
    if policy is None or policy.mcp is None:
        return
    for server in servers:
        policy.check_mcp(server.name, server.target)
