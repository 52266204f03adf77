"""A throwaway PostgreSQL server for the tests and the benchmarks, started from Debian's binaries.

`PgServer.start()` runs `initdb` into a temporary directory and `pg_ctl start` on a free loopback
port. PostgreSQL refuses to run as root, so as root the server binaries run as the `postgres`
user (`runuser`). When the binaries are missing and we are root, Debian's `postgresql` package is
installed with `apt-get`. `unavailable()` says why a server cannot be had, or returns None.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

from tests.locks import apt_install

__all__ = ["PgServer", "bindir", "unavailable"]

_PG_USER = "postgres"


def bindir() -> Path | None:
    """The newest `/usr/lib/postgresql/<version>/bin` that has `pg_ctl`, else one on PATH."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).resolve().parent if on_path else None


def unavailable() -> str | None:
    """Why a throwaway server cannot be started here (installing it if we can), or None."""
    why = apt_install(["postgresql"], present=lambda: bindir() is not None)
    if why is not None:
        return why
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam(_PG_USER)
        except KeyError:
            # The package normally creates it; an image may have the binaries without the user.
            cmd = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
            try:
                import grp

                grp.getgrnam(_PG_USER)
                cmd += ["-g", _PG_USER]  # the group is left over from the package
            except KeyError:
                pass
            done = subprocess.run([*cmd, _PG_USER], capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                return f"running as root, no `{_PG_USER}` user to run PostgreSQL as, and useradd failed: {done.stderr.strip()}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One throwaway cluster: `start()`, `url(dbname)`, `create_database()`, `stop()`."""

    def __init__(self, *, fast: bool = True) -> None:
        """`fast` turns fsync off: commits still reach the OS, which is all a test needs."""
        self.bin = bindir()
        if self.bin is None:
            raise RuntimeError("PostgreSQL binaries not found")
        self.root = Path(tempfile.mkdtemp(prefix="flue-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.fast = fast
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            # The server runs as `postgres`: it must be able to create its data dir, log and socket.
            os.chmod(self.root, 0o777)

    def _run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", _PG_USER, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if check and done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(args)} failed: {done.stdout}{done.stderr}{log}")
        return done

    def start(self) -> PgServer:
        """initdb (first time only) and start the server; returns self once it accepts connections."""
        if not self.data.exists():
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                _PG_USER,
                "-E",
                "UTF8",
                "--locale=C.UTF-8" if _has_c_utf8() else "--no-locale",
            )
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        if self.fast:
            options += " -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o", options, "start")
        return self

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server (`immediate` is a crash as far as clients can tell)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def url(self, dbname: str = "postgres", *, password: str | None = None) -> str:
        auth = _PG_USER if password is None else f"{_PG_USER}:{password}"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

    def destroy(self) -> None:
        """Stop the server and remove its files."""
        if self.data.exists():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _has_c_utf8() -> bool:
    try:
        out = subprocess.run(["locale", "-a"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.lower() in ("c.utf8", "c.utf-8") for line in out.split())
