"""A throwaway Postgres 15 with wal2json, for the tests and the soak script.

``PostgresServer`` runs ``initdb`` into a fresh temporary directory, configures it for logical
decoding (``wal_level=logical``, replication slots and WAL senders), listens on 127.0.0.1 at a free
port with its unix socket inside the temporary directory, starts it with ``pg_ctl`` and waits until
it accepts connections. Leaving the ``with`` block stops it (fast shutdown) and removes the directory;
``pause`` and ``resume`` stop and start it in between, its data kept (Postgres gone for a while).

Postgres refuses to run as root, so when this process is root the server binaries run as an
unprivileged system user (``postgres``, which Debian's package creates; created here if missing) that
owns the data directory. Durability settings are off (``fsync=off``): the server is disposable, and
logical decoding does not depend on them.

    with PostgresServer() as pg:
        conn = psycopg.connect(pg.dsn())
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BINDIR = Path(os.environ.get("WAL_LAKE_PG_BINDIR", "/usr/lib/postgresql/15/bin"))
SERVER_USER = os.environ.get("WAL_LAKE_PG_OS_USER", "postgres")
SUPERUSER = "postgres"


class PostgresSetupError(RuntimeError):
    """The throwaway server could not be created or started."""


def missing_requirements(bindir: Path = PG_BINDIR) -> str | None:
    """Why a server cannot be started here (None when it can): absent binaries or wal2json."""
    for binary in ("initdb", "pg_ctl", "postgres"):
        if not (bindir / binary).is_file():
            return f"Postgres binaries not found in {bindir} (run scripts/setup.sh --postgres)"
    try:
        pkglibdir = subprocess.run(
            [str(bindir / "pg_config"), "--pkglibdir"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pkglibdir = str(bindir.parent / "lib")
    if not (Path(pkglibdir) / "wal2json.so").is_file():
        return f"wal2json is not installed in {pkglibdir} (run scripts/setup.sh --postgres)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ensure_os_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    try:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise PostgresSetupError(f"running as root needs an OS user '{name}' for Postgres: {exc}") from exc
    return pwd.getpwnam(name)


class PostgresServer:
    """One disposable Postgres cluster; a context manager (start on enter, stop and remove on exit)."""

    def __init__(
        self,
        bindir: Path = PG_BINDIR,
        port: int | None = None,
        max_slots: int = 64,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.bindir = Path(bindir)
        self.port = port
        self.max_slots = max_slots
        self.settings = settings or {}  # more of postgresql.conf's, as written there
        self.base_dir: Path | None = None
        self.host = "127.0.0.1"
        self._run_as: pwd.struct_passwd | None = None
        self._running = False
        self._known_settings: set[str] | None = None

    @property
    def data_dir(self) -> Path:
        assert self.base_dir is not None, "server not started"
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        assert self.base_dir is not None, "server not started"
        return self.base_dir / "socket"

    @property
    def log_file(self) -> Path:
        assert self.base_dir is not None, "server not started"
        return self.base_dir / "server.log"

    def dsn(self, dbname: str = "postgres", **extra: str) -> str:
        """A libpq connection string for this server (TCP on 127.0.0.1, trust auth, superuser)."""
        parts = {"host": self.host, "port": str(self.port), "user": SUPERUSER, "dbname": dbname, **extra}
        return " ".join(f"{key}={value}" for key, value in parts.items())

    def env(self, dbname: str = "postgres") -> dict[str, str]:
        """The PG* environment variables that point libpq clients at this server."""
        return {"PGHOST": self.host, "PGPORT": str(self.port), "PGUSER": SUPERUSER, "PGDATABASE": dbname}

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        kwargs = {}
        if self._run_as is not None:
            kwargs = {"user": self._run_as.pw_uid, "group": self._run_as.pw_gid, "extra_groups": []}
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.base_dir,
            **kwargs,
        )
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise PostgresSetupError(f"{args[0]} failed: {detail[-1] if detail else result.returncode}")
        return result

    def start(self) -> PostgresServer:
        problem = missing_requirements(self.bindir)
        if problem:
            raise PostgresSetupError(problem)
        self.base_dir = Path(tempfile.mkdtemp(prefix="wal_lake_pg_"))
        self.socket_dir.mkdir()
        if os.geteuid() == 0:
            self._run_as = _ensure_os_user(SERVER_USER)
            for path in (self.base_dir, self.socket_dir):
                os.chown(path, self._run_as.pw_uid, self._run_as.pw_gid)
        try:
            self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            )
            self._start_with_free_port()
        except BaseException:
            self._cleanup()
            raise
        return self

    def _start_with_free_port(self) -> None:
        # Another process may take the port between picking and binding it: try a few.
        last_error: Exception | None = None
        for _attempt in range(5):
            port = self.port or free_port()
            self._write_config(port)
            try:
                self._run(
                    "pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data_dir), "-l", str(self.log_file)
                )
            except PostgresSetupError as exc:
                last_error = exc
                if self.port:
                    break
                continue
            self.port = port
            self._running = True
            self._wait_ready()
            return
        log_tail = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
        raise PostgresSetupError(f"Postgres did not start: {last_error}\n{log_tail}")

    def _write_config(self, port: int) -> None:
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "wal_level": "logical",
            "max_replication_slots": str(self.max_slots),
            "max_wal_senders": str(self.max_slots),
            "max_connections": "200",
            "fsync": "off",
            "full_page_writes": "off",
            "timezone": "'UTC'",
            "log_timezone": "'UTC'",
            "shared_buffers": "64MB",
            **self.settings,
        }
        # Newer 15.x servers (15.20 on) let only listed libraries be output plugins, superusers
        # included; older ones refuse to start with that line. Set it only where the server knows it.
        if "output_plugin_libraries" in self.known_settings():
            settings["output_plugin_libraries"] = "'pgoutput, test_decoding, wal2json'"
        conf = self.data_dir / "postgresql.auto.conf"
        conf.write_text("".join(f"{key} = {value}\n" for key, value in settings.items()))
        if self._run_as is not None:
            os.chown(conf, self._run_as.pw_uid, self._run_as.pw_gid)

    def known_settings(self) -> set[str]:
        """The configuration parameters the installed server knows (``postgres --describe-config``)."""
        if self._known_settings is None:
            described = self._run("postgres", "--describe-config").stdout
            self._known_settings = {line.split("\t", 1)[0] for line in described.splitlines() if line}
        return self._known_settings

    def _wait_ready(self, timeout: float = 30) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2) as conn:
                    conn.execute("select 1")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise PostgresSetupError(
                        f"Postgres on port {self.port} is not accepting connections: {exc}"
                    ) from exc
                time.sleep(0.1)

    def stop(self) -> None:
        try:
            if self._running:
                self._run("pg_ctl", "stop", "-m", "fast", "-w", "-t", "60", "-D", str(self.data_dir))
                self._running = False
        finally:
            self._cleanup()

    def pause(self) -> None:
        """Stop the server (fast shutdown: clients are disconnected) and keep its data: Postgres
        gone, as to its clients. ``resume`` starts it again on the same port."""
        self._run("pg_ctl", "stop", "-m", "fast", "-w", "-t", "60", "-D", str(self.data_dir))
        self._running = False

    def resume(self) -> None:
        """Start a paused server again, on its port, with its databases and slots."""
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data_dir), "-l", str(self.log_file))
        self._running = True
        self._wait_ready()

    def _cleanup(self) -> None:
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def create_database(self, name: str) -> str:
        """Create a database (dropping one of that name first); returns its DSN."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        return self.dsn(name)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


if __name__ == "__main__":
    # Manual use: start a server, print how to reach it, stop on Ctrl-C.
    with PostgresServer() as server:
        print(f"Postgres running: {server.dsn()}  (data in {server.data_dir}; Ctrl-C stops and removes it)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
