"""Postgres log sequence numbers: the ``X/Y`` hex text Postgres prints and the bigint tables store.

An LSN is a 64-bit byte position in the write-ahead log. Postgres prints it as two hex halves,
``X/Y``; wal_lake stores ``(X << 32) | Y`` as a bigint so positions compare and sort as numbers. The
same rule in Spark SQL is the ``lsn_to_text`` macro, and for a Spark column
``python_jobs.ingest.changeset.lsn_to_bigint``.
"""

from __future__ import annotations


def parse_lsn(text: str) -> int:
    """``"16/B374D848"`` -> ``0x16B374D848``."""
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(value: int) -> str:
    """``0x16B374D848`` -> ``"16/B374D848"`` (upper-case hex, no padding, as Postgres prints it)."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def lsn_hex16(value: int) -> str:
    """The LSN as 16 hex digits: sorts as text in LSN order (landing file names use it)."""
    return f"{value:016X}"
