"""Which backend a `db=` value names, how its URL is shown, and whose conversations these are.

Nothing here imports a database driver: a PostgreSQL URL is recognised by its scheme alone, so
SQLite users never load psycopg.
"""

from __future__ import annotations

import getpass
import os
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["is_postgres_url", "mask_url", "namespace_of", "scoped_user"]

_SCHEMES = ("postgresql://", "postgres://")
_PASSWORD_IN_QUERY = re.compile(r"(?i)(password=)[^&]*")
_NAMESPACE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*:.")


def is_postgres_url(db: Any) -> bool:
    """True for a `postgresql://` (or `postgres://`) URL string."""
    return isinstance(db, str) and db.strip().lower().startswith(_SCHEMES)


def mask_url(url: str) -> str:
    """The URL with any password replaced by `***` (in the netloc and in `?password=`)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            if ":" in userinfo:
                netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
        return urlunsplit(parts._replace(netloc=netloc, query=_PASSWORD_IN_QUERY.sub(r"\1***", parts.query)))
    except ValueError:
        return "postgresql://***"  # unparseable: show nothing that might be a secret


def scoped_user() -> str:
    """Whose conversations these are by default: `JUPYTERHUB_USER`, else the OS user."""
    user = os.environ.get("JUPYTERHUB_USER")
    if user:
        return user
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for a container's uid
        return f"uid{os.getuid()}"


def namespace_of(conversation_id: str) -> str | None:
    """The explicit shared namespace (`team` of `team:weekly-report`), or None."""
    return conversation_id.split(":", 1)[0] if _NAMESPACE.match(conversation_id) else None
