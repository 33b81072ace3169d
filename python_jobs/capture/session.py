"""The capture's Postgres session: connecting, and the settings that shape wal2json's text."""

from __future__ import annotations

import psycopg

from python_jobs.redact import mask_dsn

# wal2json renders values with the session's settings; pinned, the same row renders the same way in
# a snapshot and in the stream, whatever the server's defaults.
SESSION_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "bytea_output": "hex",
    "extra_float_digits": "1",
}


class CaptureError(RuntimeError):
    """A failure worth one line to the user (connection, plugin, slot state)."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def where(dsn: str) -> str:
    """Where a DSN points, for a message: never its password (``python_jobs.redact``)."""
    return mask_dsn(dsn) if dsn else "the PG* environment"


def connect(dsn: str, **kwargs) -> psycopg.Connection:
    try:
        conn = psycopg.connect(dsn, autocommit=True, **kwargs)
    except psycopg.OperationalError as exc:
        raise CaptureError(f"cannot connect to Postgres ({where(dsn)}): {first_line(exc)}") from exc
    except psycopg.ProgrammingError as exc:
        # libpq's parse error quotes a piece of the string, which may be the password: not shown.
        raise CaptureError(
            "cannot connect to Postgres: the connection string does not parse (check its key=value "
            "pairs and their quoting, or the URI); it is not shown, since it may hold a password"
        ) from exc
    return conn


def pin_settings(conn: psycopg.Connection) -> None:
    for name, value in SESSION_SETTINGS.items():
        conn.execute("select set_config(%s, %s, false)", (name, value))
