"""The wal2json writer: a transaction as ``format-version=2`` lines, as in ``tests/fixtures``."""

from __future__ import annotations

from python_jobs.lsn import format_lsn
from testkit.sample.model import (
    NUMERIC,
    SCHEMA,
    TABLES,
    TEXT,
    TIMESTAMPTZ,
    W_INSERT,
    W_TRUNCATE,
    W_UPDATE,
    Change,
    Transaction,
    fraction,
    numeric_text,
    whole_seconds,
)
from testkit.sample.sink import CHANGE, CONTROL

WAL2JSON = "wal2json"


def pg_timestamptz(micros: int) -> str:
    """timestamptz as Postgres outputs it in UTC (wal2json values and timestamps)."""
    return whole_seconds(micros).strftime("%Y-%m-%d %H:%M:%S") + fraction(micros) + "+00"


def _wal2json_value(kind: str, value) -> str:
    if value is None:
        return "null"
    if kind == TEXT:
        return '"' + value + '"'  # generated text never holds a quote, backslash or control char
    if kind == NUMERIC:
        return numeric_text(value)
    if kind == TIMESTAMPTZ:
        return '"' + pg_timestamptz(value) + '"'
    return str(value)


class Wal2JsonFormat:
    """wal2json ``format-version=2`` with the options ``tests/fixtures`` were captured with (xids,
    timestamps, LSNs, primary keys)."""

    def __init__(self):
        self._pk = {
            t: ",".join(f'{{"name":"{c}","type":"{dict(cols)[c]}"}}' for c in key)
            for t, (cols, key) in TABLES.items()
        }

    def _columns(self, table: str, row: dict, unsent: frozenset) -> str:
        cols = TABLES[table][0]
        return ",".join(
            f'{{"name":"{name}","type":"{kind}","value":{_wal2json_value(kind, row[name])}}}'
            for name, kind in cols
            if name not in unsent
        )

    def _identity(self, table: str, key: tuple) -> str:
        cols, key_cols = TABLES[table]
        kinds = dict(cols)
        return ",".join(
            f'{{"name":"{c}","type":"{kinds[c]}","value":{_wal2json_value(kinds[c], v)}}}'
            for c, v in zip(key_cols, key, strict=True)
        )

    def render(self, txn: Transaction) -> list[tuple[int, str, str]]:
        """The transaction's lines as ``(lsn, line, kind)``: B, one line per change, C."""
        head = f'"xid":{txn.xid},"timestamp":"{pg_timestamptz(txn.commit_micros)}"'
        boundary = f'{head},"lsn":"{format_lsn(txn.commit_lsn)}","nextlsn":"{format_lsn(txn.next_lsn)}"}}'
        # B carries the commit LSN, like C; for naming files it sits just before the first change.
        out = [(txn.changes[0].lsn - 1, '{"action":"B",' + boundary, CONTROL)]
        out.extend((ch.lsn, self._change_line(head, ch), CHANGE) for ch in txn.changes)
        out.append((txn.commit_lsn, '{"action":"C",' + boundary, CONTROL))
        return out

    def _change_line(self, head: str, ch: Change) -> str:
        common = (
            f'{{"action":"{ch.action}",{head},"lsn":"{format_lsn(ch.lsn)}",'
            f'"schema":"{SCHEMA}","table":"{ch.table}"'
        )
        pk = self._pk[ch.table]
        if ch.action == W_TRUNCATE:
            return common + "}"
        if ch.action == W_INSERT:
            return f'{common},"columns":[{self._columns(ch.table, ch.row, ch.unsent)}],"pk":[{pk}]}}'
        if ch.action == W_UPDATE:
            return (
                f'{common},"columns":[{self._columns(ch.table, ch.row, ch.unsent)}],'
                f'"identity":[{self._identity(ch.table, ch.old_key)}],"pk":[{pk}]}}'
            )
        return f'{common},"identity":[{self._identity(ch.table, ch.old_key)}],"pk":[{pk}]}}'

    def malformed(self, txn: Transaction) -> list[str]:
        full = self.render(txn)[1][1]
        return [full[: len(full) // 2], "pg_recvlogical: error: unexpected termination of replication stream"]
