"""The capture's Postgres session: connecting, and the settings that shape wal2json's text."""

from __future__ import annotations

import psycopg

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


def connect(dsn: str, **kwargs) -> psycopg.Connection:
    try:
        conn = psycopg.connect(dsn, autocommit=True, **kwargs)
    except psycopg.OperationalError as exc:
        where = dsn or "the PG* environment"
        raise CaptureError(f"cannot connect to Postgres ({where}): {first_line(exc)}") from exc
    return conn


def pin_settings(conn: psycopg.Connection) -> None:
    for name, value in SESSION_SETTINGS.items():
        conn.execute("select set_config(%s, %s, false)", (name, value))
