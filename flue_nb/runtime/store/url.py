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

__all__ = ["db_from_env", "is_postgres_url", "mask_url", "namespace_of", "open_any", "scoped_user", "store_key"]

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


def db_from_env(db: Any) -> Any:
    """`db` if given, else `$FLUE_DB` (a path or a URL), else None (the default SQLite file)."""
    if db is None or db == "":
        return os.environ.get("FLUE_DB") or None
    return db


def store_key(db: Any, cwd: str) -> str:
    """One key per store: a PostgreSQL URL as given, an SQLite path made absolute."""
    if is_postgres_url(db):
        return str(db).strip()
    if db is None:
        return os.path.join(cwd, ".flue", "flue.sqlite")
    if os.fspath(db) == ":memory:":
        return ":memory:"
    return os.path.abspath(os.path.join(cwd, os.path.expanduser(os.fspath(db))))


def open_any(db: Any, *, cwd: str) -> Any:
    """Open the store `db` names: a `postgresql://` URL, else an SQLite path (see `open_store`)."""
    if is_postgres_url(db):
        from flue_nb.runtime.store.postgres import PostgresStore

        return PostgresStore(str(db).strip())
    from flue_nb.runtime.store.sqlite import open_store

    return open_store(db, cwd=cwd)
