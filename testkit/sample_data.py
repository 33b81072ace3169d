"""Seeded sample landing zone: the same shop workload as wal2json and as Debezium change events.

    python -m testkit.sample_data --out landing --seed 7 --transactions 80 --format both

One seeded workload (``Workload``) drives an in-memory model of three tables and yields abstract
transactions; one writer per format renders them as JSON Lines exactly as the real tools do
(wal2json ``format-version=2`` as in ``tests/fixtures``; Debezium 2.x Postgres events with the
Kafka key beside the value). Lines are built with plain string formatting and streamed to files
rotated every ``--lines-per-file`` lines, named ``%016X.jsonl`` after the first LSN they hold, so
names sort in WAL order.

The landing zone deliberately contains what real capture produces: several touches of one row in
one transaction ending in a delete, a delete then a re-insert, a primary-key change, a truncate
followed by inserts, updates that leave a TOASTed column out, a transaction split across two files,
a replay of the last transactions of a file at the start of the next one, a verbatim copy of a file
under a later-sorting name, and a few malformed lines. ``manifest.json`` counts all of it, and each
source folder holds ``_expected.json``: the tables' final rows as Postgres's ``to_jsonb`` renders
them (the form of the fixture's ``accounts.expected.json``), which ``consumer_records`` must equal.
Its leading underscore hides it from the ingestion job (and from Spark), which land every other
file of a source folder.

``manifest.json`` (at ``--out``): ``{"seed", "transactions", "sources": {source_id: {...}}}`` where
each source has ``format``, ``path``, ``files`` (names in order), ``lines`` (all lines written),
``changes_written`` (change lines, duplicates included), ``distinct_positions`` (changes once each),
``duplicate_change_lines``, ``control_lines`` (wal2json ``B``/``C``), ``malformed_lines`` and
``expected_rejects`` (copies of a malformed line count again), ``pending_lines`` (Debezium's
trailing transaction, which no later event proves complete), ``expected_state`` (path of
``_expected.json`` relative to ``--out``), ``expected_rows`` per table and ``anomalies`` (which
file holds the split, the replay, the copy, the snapshot). For every source
``lines = changes_written + control_lines + malformed_lines``. The Debezium expected state is the
state before the trailing transaction, i.e. as of the frontier.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from python_jobs.lsn import format_lsn

WAL2JSON = "wal2json"
DEBEZIUM = "debezium"
EXPECTED_STATE = "_expected.json"

# wal2json action codes and Debezium op codes.
W_BEGIN, W_COMMIT, W_INSERT, W_UPDATE, W_DELETE, W_TRUNCATE = "B", "C", "I", "U", "D", "T"
DBZ_CREATE, DBZ_UPDATE, DBZ_DELETE, DBZ_READ, DBZ_TRUNCATE = "c", "u", "d", "r", "t"
DBZ_UNAVAILABLE = "__debezium_unavailable_value"

# Postgres stores a text value out of line (TOAST) above roughly 2 kB; an UPDATE that does not
# touch such a value does not log it, so wal2json leaves the column out and Debezium sends the
# placeholder. Generated bios are either short or above this size.
TOAST_THRESHOLD = 2000

BIGINT, INTEGER, TEXT, NUMERIC, TIMESTAMPTZ = (
    "bigint",
    "integer",
    "text",
    "numeric(12,2)",
    "timestamp with time zone",
)

CUSTOMERS, ORDERS, ORDER_ITEMS = "customers", "orders", "order_items"
SCHEMA = "public"

# table -> ([(column, type)], key columns). Values in the model: int for integers, str for text,
# int cents for numeric(12,2), int microseconds since the epoch for timestamptz, None for NULL.
TABLES: dict[str, tuple[list[tuple[str, str]], list[str]]] = {
    CUSTOMERS: (
        [("id", BIGINT), ("email", TEXT), ("name", TEXT), ("bio", TEXT), ("updated_at", TIMESTAMPTZ)],
        ["id"],
    ),
    ORDERS: (
        [
            ("id", BIGINT),
            ("customer_id", BIGINT),
            ("status", TEXT),
            ("total", NUMERIC),
            ("placed_at", TIMESTAMPTZ),
        ],
        ["id"],
    ),
    ORDER_ITEMS: (
        [("order_id", BIGINT), ("line_no", INTEGER), ("sku", TEXT), ("qty", INTEGER)],
        ["order_id", "line_no"],
    ),
}

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
START_MICROS = int((datetime(2026, 11, 20, 8, 0, tzinfo=UTC) - EPOCH).total_seconds()) * 1_000_000
START_LSN = 0x1_5000_0000
START_XID = 1000
DEBEZIUM_VERSION = "2.7.3.Final"

WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar "
    "papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
).split()
STATUSES = ["new", "paid", "packed", "shipped", "delivered", "cancelled"]


# --------------------------------------------------------------------------------------------
# Value rendering
# --------------------------------------------------------------------------------------------


def _fraction(micros: int) -> str:
    """Postgres prints fractional seconds with trailing zeros dropped, and none when zero."""
    frac = micros % 1_000_000
    return "" if frac == 0 else "." + f"{frac:06d}".rstrip("0")


def _utc(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros - micros % 1_000_000)


def pg_timestamptz(micros: int) -> str:
    """timestamptz as Postgres outputs it in UTC (wal2json values and timestamps)."""
    return _utc(micros).strftime("%Y-%m-%d %H:%M:%S") + _fraction(micros) + "+00"


def jsonb_timestamptz(micros: int) -> str:
    """timestamptz as ``to_jsonb`` renders it in UTC."""
    return _utc(micros).strftime("%Y-%m-%dT%H:%M:%S") + _fraction(micros) + "+00:00"


def debezium_timestamptz(micros: int) -> str:
    """Debezium's ``io.debezium.time.ZonedTimestamp`` (ISO-8601, UTC as ``Z``)."""
    return _utc(micros).strftime("%Y-%m-%dT%H:%M:%S") + _fraction(micros) + "Z"


def numeric_text(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d}"


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


def _debezium_value(kind: str, value) -> str:
    if value is None:
        return "null"
    if kind == TEXT:
        return '"' + value + '"'
    if kind == NUMERIC:  # decimal.handling.mode=string
        return '"' + numeric_text(value) + '"'
    if kind == TIMESTAMPTZ:
        return '"' + debezium_timestamptz(value) + '"'
    return str(value)


def jsonb_value(kind: str, value):
    """A model value as ``to_jsonb`` gives it (numeric as a JSON number, as in the fixture)."""
    if value is None:
        return None
    if kind == NUMERIC:
        return value / 100
    if kind == TIMESTAMPTZ:
        return jsonb_timestamptz(value)
    return value


# --------------------------------------------------------------------------------------------
# The workload: a model of the three tables and the transactions that change it
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Change:
    """One decoded change. ``row`` is the full new row (I/U); ``old_key`` the old key (U/D)."""

    action: str  # W_INSERT, W_UPDATE, W_DELETE, W_TRUNCATE
    table: str
    row: dict | None = None
    old_key: tuple | None = None
    unsent: frozenset = frozenset()  # columns an UPDATE does not log (unchanged TOAST)
    lsn: int = 0


@dataclass(slots=True)
class Transaction:
    xid: int
    commit_micros: int
    changes: list[Change]
    commit_lsn: int = 0
    next_lsn: int = 0
    # (table, key, row before the change or None), in change order: undoes the transaction.
    undo: list = field(default_factory=list)


@dataclass
class Model:
    """Each table's live rows by key, in the generator's value representation."""

    rows: dict[str, dict[tuple, dict]] = field(default_factory=lambda: {t: {} for t in TABLES})

    @staticmethod
    def key_of(table: str, row: dict) -> tuple:
        return tuple(row[c] for c in TABLES[table][1])

    def apply(self, change: Change) -> None:
        rows = self.rows[change.table]
        if change.action == W_INSERT:
            rows[self.key_of(change.table, change.row)] = dict(change.row)
        elif change.action == W_UPDATE:
            del rows[change.old_key]
            rows[self.key_of(change.table, change.row)] = dict(change.row)
        elif change.action == W_DELETE:
            del rows[change.old_key]
        elif change.action == W_TRUNCATE:
            rows.clear()

    def expected_state(self) -> dict[str, list[dict]]:
        """Rows as ``select to_jsonb(t)`` returns them: keys in jsonb order, rows by key."""
        state = {}
        for table, (columns, _) in TABLES.items():
            ordered = sorted(columns, key=lambda c: (len(c[0]), c[0]))
            state[f"{SCHEMA}.{table}"] = [
                {name: jsonb_value(kind, row[name]) for name, kind in ordered}
                for _, row in sorted(self.rows[table].items())
            ]
        return state


class Workload:
    """Seeded transactions over the shop tables, applied to ``model`` as they are generated.

    The special cases the models must get right happen at fixed fractions of the run, so every
    landing zone of at least ``MIN_TRANSACTIONS`` transactions holds each of them at least once.
    """

    MIN_TRANSACTIONS = 20
    SEED_FRACTION = 0.1  # the first transactions only insert customers (the Debezium snapshot)

    def __init__(self, seed: int, transactions: int, bio_bytes: int = 2400):
        if transactions < self.MIN_TRANSACTIONS:
            raise ValueError(f"--transactions must be at least {self.MIN_TRANSACTIONS}")
        self.rng = random.Random(seed)
        self.transactions = transactions
        self.model = Model()
        self.next_customer = 1
        self.next_order = 1
        self.lsn = START_LSN
        self.micros = START_MICROS
        self.xid = START_XID
        self.seed_transactions = min(1000, max(2, int(transactions * self.SEED_FRACTION)))
        rng = random.Random(seed ^ 0x5EED)
        # A pool of long texts: building a fresh 2 kB string per row would dominate large runs.
        self.long_bios = [
            " ".join(rng.choice(WORDS) for _ in range(bio_bytes // 5))[:bio_bytes] for _ in range(16)
        ]
        special = {
            "multi_touch_delete": 0.30,
            "delete_reinsert": 0.40,
            "pk_change": 0.50,
            "truncate": 0.60,
            "toast_update": 0.70,
        }
        self.special = {
            max(self.seed_transactions, int(transactions * f)): name for name, f in special.items()
        }
        self.reinsert_pending: dict | None = None

    # -- values -----------------------------------------------------------------------------

    def _bio(self) -> str | None:
        roll = self.rng.random()
        if roll < 0.2:
            return None
        if roll < 0.6:
            return " ".join(self.rng.choices(WORDS, k=self.rng.randint(2, 8)))
        return self.long_bios[self.rng.randrange(len(self.long_bios))]

    def _customer(self, cid: int) -> dict:
        name = f"{self.rng.choice(WORDS).title()} {self.rng.choice(WORDS).title()}"
        return {
            "id": cid,
            "email": f"c{cid}.{self.rng.randrange(10_000)}@example.com",
            "name": name,
            "bio": self._bio(),
            "updated_at": self.micros,
        }

    def _pick(self, table: str, predicate=None):
        rows = self.model.rows[table]
        if not rows:
            return None
        # Sampling a dict by index is O(n); a bounded number of random probes of a few keys is not.
        keys = self._keys(table)
        for _ in range(8):
            key = keys[self.rng.randrange(len(keys))]
            row = rows.get(key)
            if row is not None and (predicate is None or predicate(row)):
                return row
        return next((r for r in rows.values() if predicate is None or predicate(r)), None)

    def _keys(self, table: str) -> list:
        # Cached key list, rebuilt lazily: deleted keys are skipped by _pick's probe.
        cache = self.__dict__.setdefault("_key_cache", {})
        entry = cache.get(table)
        rows = self.model.rows[table]
        if entry is None or entry[1] > 2 * len(rows) + 64 or len(rows) > 2 * entry[1] + 64:
            entry = (list(rows), len(rows))
            cache[table] = entry
        return entry[0] if entry[0] else list(rows)

    # -- changes ----------------------------------------------------------------------------

    def _emit(self, txn_changes: list[Change], change: Change) -> None:
        self.lsn += 0x28 + self.rng.randrange(0x20, 0x120)
        if change.row is not None and change.row.get("bio") and "bio" not in change.unsent:
            self.lsn += len(change.row["bio"]) // 4
        change.lsn = self.lsn
        rows = self.model.rows[change.table]
        if change.action == W_TRUNCATE:
            self._undo.extend((change.table, key, row) for key, row in rows.items())
        else:
            if change.old_key is not None:
                self._undo.append((change.table, change.old_key, rows.get(change.old_key)))
            if change.row is not None:
                new_key = Model.key_of(change.table, change.row)
                self._undo.append((change.table, new_key, rows.get(new_key)))
        self.model.apply(change)
        txn_changes.append(change)

    def _insert_customer(self, out: list[Change]) -> dict:
        row = self._customer(self.next_customer)
        self.next_customer += 1
        self._emit(out, Change(W_INSERT, CUSTOMERS, row=row))
        return row

    def _update_customer(self, out: list[Change], row: dict, touch_bio: bool = False) -> None:
        new = dict(row)
        new["email"] = f"c{row['id']}.{self.rng.randrange(10_000)}@example.com"
        new["updated_at"] = self.micros
        unsent: frozenset = frozenset()
        if touch_bio:
            new["bio"] = self._bio()
        elif row["bio"] is not None and len(row["bio"]) > TOAST_THRESHOLD:
            unsent = frozenset({"bio"})
        self._emit(out, Change(W_UPDATE, CUSTOMERS, row=new, old_key=(row["id"],), unsent=unsent))

    def _insert_order(self, out: list[Change], order_id: int | None = None) -> None:
        customer = self._pick(CUSTOMERS)
        if customer is None:
            customer = self._insert_customer(out)
        if order_id is None:
            order_id = self.next_order
            self.next_order += 1
        items = [
            {"order_id": order_id, "line_no": n, "sku": f"SKU-{self.rng.randrange(1000):04d}", "qty": 1}
            for n in range(1, self.rng.randint(1, 3) + 1)
        ]
        for item in items:
            item["qty"] = self.rng.randint(1, 5)
        order = {
            "id": order_id,
            "customer_id": customer["id"],
            "status": "new",
            "total": sum(self.rng.randrange(100, 20_000) for _ in items),
            "placed_at": self.micros,
        }
        self._emit(out, Change(W_INSERT, ORDERS, row=order))
        for item in items:
            self._emit(out, Change(W_INSERT, ORDER_ITEMS, row=item))

    def _update_order(self, out: list[Change], row: dict) -> None:
        new = dict(row, status=self.rng.choice(STATUSES))
        if self.rng.random() < 0.3:
            new["total"] = row["total"] + self.rng.randrange(-50, 500)
        self._emit(out, Change(W_UPDATE, ORDERS, row=new, old_key=(row["id"],)))

    def _delete_order(self, out: list[Change], row: dict) -> None:
        items = self.model.rows[ORDER_ITEMS]
        for line_no in range(1, 4):
            if (row["id"], line_no) in items:
                self._emit(out, Change(W_DELETE, ORDER_ITEMS, old_key=(row["id"], line_no)))
        self._emit(out, Change(W_DELETE, ORDERS, old_key=(row["id"],)))

    def _random_change(self, out: list[Change]) -> None:
        roll = self.rng.random()
        if roll < 0.20:
            self._insert_customer(out)
        elif roll < 0.45:
            self._insert_order(out)
        elif roll < 0.60:
            row = self._pick(CUSTOMERS)
            if row is not None:
                self._update_customer(out, row, touch_bio=self.rng.random() < 0.2)
        elif roll < 0.80:
            row = self._pick(ORDERS)
            if row is not None:
                self._update_order(out, row)
        elif roll < 0.90:
            item = self._pick(ORDER_ITEMS)
            if item is not None:
                new = dict(item, qty=item["qty"] + 1)
                key = (item["order_id"], item["line_no"])
                self._emit(out, Change(W_UPDATE, ORDER_ITEMS, row=new, old_key=key))
        elif roll < 0.96:
            row = self._pick(ORDERS)
            if row is not None:
                self._delete_order(out, row)
        else:
            row = self._pick(CUSTOMERS)
            if row is not None:
                self._emit(out, Change(W_DELETE, CUSTOMERS, old_key=(row["id"],)))

    def _special_change(self, name: str, out: list[Change]) -> None:
        if name == "multi_touch_delete":
            row = self._insert_customer(out)
            self._update_customer(out, self.model.rows[CUSTOMERS][(row["id"],)])
            self._update_customer(out, self.model.rows[CUSTOMERS][(row["id"],)], touch_bio=True)
            self._emit(out, Change(W_DELETE, CUSTOMERS, old_key=(row["id"],)))
        elif name == "delete_reinsert":
            row = self._pick(ORDERS)
            if row is None:
                self._insert_order(out)
                row = self._pick(ORDERS)
            self._delete_order(out, row)
            self.reinsert_pending = row  # re-inserted by the next transaction
        elif name == "pk_change":
            # Only a row whose bio is stored inline: the new tuple of a key change also leaves an
            # unchanged TOASTed value out, which no consumer could fill in for the new key.
            row = self._pick(CUSTOMERS, lambda r: r["bio"] is None or len(r["bio"]) <= TOAST_THRESHOLD)
            if row is None:
                row = dict(self._customer(self.next_customer), bio=None)
                self.next_customer += 1
                self._emit(out, Change(W_INSERT, CUSTOMERS, row=row))
            new = dict(row, id=self.next_customer, updated_at=self.micros)
            self.next_customer += 1
            self._emit(out, Change(W_UPDATE, CUSTOMERS, row=new, old_key=(row["id"],)))
        elif name == "truncate":
            self._insert_order(out)
            self._emit(out, Change(W_TRUNCATE, ORDER_ITEMS))
            self._insert_order(out)
        elif name == "toast_update":
            long_bio = self.long_bios[0]
            row = self._insert_customer(out)
            row = dict(self.model.rows[CUSTOMERS][(row["id"],)], bio=long_bio)
            self._emit(out, Change(W_UPDATE, CUSTOMERS, row=row, old_key=(row["id"],)))
            self._update_customer(out, self.model.rows[CUSTOMERS][(row["id"],)])

    def __iter__(self) -> Iterator[Transaction]:
        for n in range(self.transactions):
            self.micros += self.rng.randrange(1_000, 400_000)
            self.xid += 1 + (self.rng.random() < 0.1)  # transactions of other databases use xids too
            changes: list[Change] = []
            self._undo: list = []
            if n < self.seed_transactions:
                for _ in range(self.rng.randint(2, 5)):
                    self._insert_customer(changes)
            elif n in self.special:
                self._special_change(self.special[n], changes)
            elif self.reinsert_pending is not None:
                row, self.reinsert_pending = self.reinsert_pending, None
                self._emit(changes, Change(W_INSERT, ORDERS, row=dict(row, status="new")))
            else:
                for _ in range(self.rng.randint(1, 6)):
                    self._random_change(changes)
            if not changes:
                self._insert_customer(changes)
            self.lsn += 0x38 + self.rng.randrange(0x10, 0x40)
            txn = Transaction(self.xid, self.micros, changes, self.lsn, self.lsn + 0x30, undo=self._undo)
            self.lsn = txn.next_lsn
            yield txn


# --------------------------------------------------------------------------------------------
# Formats: a transaction -> [(lsn, line, kind)]
# --------------------------------------------------------------------------------------------

CHANGE, CONTROL = "change", "control"


class Wal2JsonFormat:
    name = WAL2JSON

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

    def render(self, txn: Transaction, **_) -> list[tuple[int, str, str]]:
        head = f'"xid":{txn.xid},"timestamp":"{pg_timestamptz(txn.commit_micros)}"'
        boundary = f'{head},"lsn":"{format_lsn(txn.commit_lsn)}","nextlsn":"{format_lsn(txn.next_lsn)}"}}'
        # B carries the commit LSN, like C; for naming files it sits just before the first change.
        out = [(txn.changes[0].lsn - 1, '{"action":"B",' + boundary, CONTROL)]
        for ch in txn.changes:
            common = (
                f'{{"action":"{ch.action}",{head},"lsn":"{format_lsn(ch.lsn)}",'
                f'"schema":"{SCHEMA}","table":"{ch.table}"'
            )
            pk = self._pk[ch.table]
            if ch.action == W_TRUNCATE:
                line = common + "}"
            elif ch.action == W_INSERT:
                line = f'{common},"columns":[{self._columns(ch.table, ch.row, ch.unsent)}],"pk":[{pk}]}}'
            elif ch.action == W_UPDATE:
                line = (
                    f'{common},"columns":[{self._columns(ch.table, ch.row, ch.unsent)}],'
                    f'"identity":[{self._identity(ch.table, ch.old_key)}],"pk":[{pk}]}}'
                )
            else:
                line = f'{common},"identity":[{self._identity(ch.table, ch.old_key)}],"pk":[{pk}]}}'
            out.append((ch.lsn, line, CHANGE))
        out.append((txn.commit_lsn, '{"action":"C",' + boundary, CONTROL))
        return out

    def malformed(self, txn: Transaction) -> list[str]:
        full = self.render(txn)[1][1]
        return [full[: len(full) // 2], "pg_recvlogical: error: unexpected termination of replication stream"]


class DebeziumFormat:
    """Debezium 2.x Postgres connector, JSON converter without schemas, key and value per line.

    Connector settings this mimics: ``decimal.handling.mode=string``, default ``time.precision.mode``
    (timestamptz as ``ZonedTimestamp``), REPLICA IDENTITY DEFAULT (no ``before`` on updates; a
    delete's ``before`` holds the key, other columns null), no transaction metadata topic, and a
    primary-key change emitted as a delete of the old key and a create of the new one (the tombstone
    between them is dropped by the sink).
    """

    name = DEBEZIUM

    def __init__(self, server: str = "shop", db: str = "shop"):
        self.server = server
        self.db = db
        self.last_commit_lsn: int | None = None  # null until the first commit after a snapshot

    @staticmethod
    def _row(table: str, row: dict, unsent: frozenset = frozenset()) -> str:
        parts = []
        for name, kind in TABLES[table][0]:
            value = f'"{DBZ_UNAVAILABLE}"' if name in unsent else _debezium_value(kind, row[name])
            parts.append(f'"{name}":{value}')
        return "{" + ",".join(parts) + "}"

    @staticmethod
    def _key(table: str, key: tuple) -> str:
        cols, key_cols = TABLES[table]
        kinds = dict(cols)
        inner = ",".join(f'"{c}":{_debezium_value(kinds[c], v)}' for c, v in zip(key_cols, key, strict=True))
        return "{" + inner + "}"

    def _key_only_row(self, table: str, key: tuple) -> str:
        cols, key_cols = TABLES[table]
        values = dict(zip(key_cols, key, strict=True))
        return self._row(table, {c: values.get(c) for c, _ in cols})

    def _source(self, table: str, lsn: int, txid: int, ts_ms: int, snapshot: str, last_commit) -> str:
        seq0 = "null" if last_commit is None else f'\\"{last_commit}\\"'
        return (
            f'{{"version":"{DEBEZIUM_VERSION}","connector":"postgresql","name":"{self.server}",'
            f'"ts_ms":{ts_ms},"snapshot":"{snapshot}","db":"{self.db}",'
            f'"sequence":"[{seq0},\\"{lsn}\\"]","ts_us":{ts_ms * 1000},"ts_ns":{ts_ms * 1_000_000},'
            f'"schema":"{SCHEMA}","table":"{table}","txId":{txid},"lsn":{lsn},"xmin":null}}'
        )

    @staticmethod
    def _line(key: str, before: str, after: str, source: str, op: str, ts_ms: int) -> str:
        return (
            f'{{"key":{key},"value":{{"before":{before},"after":{after},"source":{source},'
            f'"transaction":null,"op":"{op}","ts_ms":{ts_ms},"ts_us":{ts_ms * 1000},'
            f'"ts_ns":{ts_ms * 1_000_000}}}}}'
        )

    def snapshot(self, model: Model, lsn: int, txid: int, micros: int) -> list[tuple[int, str, str]]:
        """The initial snapshot: every row of every table read at one LSN, ``op = r``."""
        rows = [(t, key, row) for t in TABLES for key, row in sorted(model.rows[t].items())]
        ts_ms = micros // 1000
        out = []
        for n, (table, key, row) in enumerate(rows):
            flag = "first" if n == 0 else "last" if n == len(rows) - 1 else "true"
            source = self._source(table, lsn, txid, ts_ms, flag, None)
            line = self._line(
                self._key(table, key), "null", self._row(table, row), source, DBZ_READ, ts_ms + 5
            )
            out.append((lsn, line, CHANGE))
        return out

    def render(self, txn: Transaction, **_) -> list[tuple[int, str, str]]:
        ts_ms = txn.commit_micros // 1000
        emitted = ts_ms + 3
        out = []
        for ch in txn.changes:
            source = self._source(ch.table, ch.lsn, txn.xid, ts_ms, "false", self.last_commit_lsn)
            if ch.action == W_TRUNCATE:
                line = self._line("null", "null", "null", source, DBZ_TRUNCATE, emitted)
                out.append((ch.lsn, line, CHANGE))
                continue
            if ch.action == W_DELETE:
                before = self._key_only_row(ch.table, ch.old_key)
                line = self._line(
                    self._key(ch.table, ch.old_key), before, "null", source, DBZ_DELETE, emitted
                )
                out.append((ch.lsn, line, CHANGE))
                continue
            new_key = Model.key_of(ch.table, ch.row)
            after = self._row(ch.table, ch.row, ch.unsent)
            if ch.action == W_UPDATE and new_key != ch.old_key:
                before = self._key_only_row(ch.table, ch.old_key)
                out.append(
                    (
                        ch.lsn,
                        self._line(
                            self._key(ch.table, ch.old_key), before, "null", source, DBZ_DELETE, emitted
                        ),
                        CHANGE,
                    )
                )
                op = DBZ_CREATE
            else:
                op = DBZ_CREATE if ch.action == W_INSERT else DBZ_UPDATE
            out.append(
                (ch.lsn, self._line(self._key(ch.table, new_key), "null", after, source, op, emitted), CHANGE)
            )
        self.last_commit_lsn = txn.commit_lsn
        return out

    def malformed(self, txn: Transaction) -> list[str]:
        full = self.render_preview(txn)
        return [full[: len(full) // 3], "}{"]

    def render_preview(self, txn: Transaction) -> str:
        saved = self.last_commit_lsn
        line = self.render(txn)[0][1]
        self.last_commit_lsn = saved
        return line


# --------------------------------------------------------------------------------------------
# Files: rotation, naming, the anomalies, counts
# --------------------------------------------------------------------------------------------


@dataclass
class SourceStats:
    lines: int = 0
    changes_written: int = 0
    distinct_positions: int = 0
    control_lines: int = 0
    malformed_lines: int = 0
    duplicate_change_lines: int = 0
    pending_lines: int = 0
    files: list[str] = field(default_factory=list)
    anomalies: dict[str, str] = field(default_factory=dict)


class Sink:
    """Writes one source's lines to rotated files, adding the split, replay and copy anomalies.

    File ``n`` (0-based) ends mid-transaction when ``n == 0`` (a split transaction); file 2 starts
    with a replay of the last two complete transactions of file 1; file 3 is copied verbatim under
    a name that sorts right after it. Other rotations happen between transactions.
    """

    REPLAY_TRANSACTIONS = 2

    def __init__(self, folder: Path, lines_per_file: int, compress: bool):
        self.folder = folder
        self.lines_per_file = lines_per_file
        self.compress = compress
        self.stats = SourceStats()
        self.fh = None
        self.path: Path | None = None
        self.file_lines = 0
        self.first_lsn = -1
        self.opened = 0  # files opened so far, copies not counted
        self.recent: list[list[tuple[int, str, str]]] = []  # complete transactions of this file
        folder.mkdir(parents=True, exist_ok=True)

    def _open(self, first_lsn: int) -> None:
        suffix = ".jsonl.gz" if self.compress else ".jsonl"
        self.path = self.folder / f"{first_lsn:016X}{suffix}"
        if self.path.exists():  # two files starting at one LSN cannot happen in WAL; be loud
            raise RuntimeError(f"refusing to overwrite {self.path}")
        self.fh = gzip.open(self.path, "wt", compresslevel=1) if self.compress else open(self.path, "w")
        self.file_lines = 0
        self.first_lsn = first_lsn
        self.stats.files.append(self.path.name)
        self.opened += 1

    def _close(self) -> None:
        if self.fh is None:
            return
        self.fh.close()
        self.fh = None
        if self.opened - 1 == 3:
            self._copy(self.path)

    def _copy(self, path: Path) -> None:
        name = path.name.split(".", 1)
        copy = path.with_name(f"{name[0]}_copy.{name[1]}")
        copy.write_bytes(path.read_bytes())
        opener = gzip.open if self.compress else open
        with opener(copy, "rt") as fh:
            for line in fh:
                self._count(line.rstrip("\n"), None, duplicate=True)
        self.stats.files.append(copy.name)
        self.stats.anomalies["copied_file"] = f"{path.name} -> {copy.name}"

    def _count(self, line: str, kind: str | None, duplicate: bool) -> None:
        if kind is None:  # classify a copied line
            kind = self._kinds.get(line, "malformed")
        self.stats.lines += 1
        if kind == CHANGE:
            self.stats.changes_written += 1
            if duplicate:
                self.stats.duplicate_change_lines += 1
            else:
                self.stats.distinct_positions += 1
        elif kind == CONTROL:
            self.stats.control_lines += 1
        else:
            self.stats.malformed_lines += 1

    @property
    def _kinds(self) -> dict[str, str]:
        return self.__dict__.setdefault("_kind_of_line", {})

    def _write(self, lsn: int, line: str, kind: str, duplicate: bool = False) -> None:
        if self.fh is None:
            self._open(lsn)
        self.fh.write(line)
        self.fh.write("\n")
        self.file_lines += 1
        if self.opened - 1 == 3:  # remember what file 3 holds, to count its copy
            self._kinds[line] = kind
        self._count(line, kind, duplicate)

    def _rotate(self) -> None:
        self._close()
        if self.opened == 2 and len(self.recent) >= self.REPLAY_TRANSACTIONS + 1:
            replay = self.recent[-self.REPLAY_TRANSACTIONS :]
            self.stats.anomalies["replayed_transactions"] = (
                f"last {self.REPLAY_TRANSACTIONS} transactions of {self.stats.files[-1]} "
                "again at the start of the next file"
            )
            for txn_lines in replay:
                for lsn, line, kind in txn_lines:
                    self._write(lsn, line, kind, duplicate=True)
            self.recent = list(replay)
        else:
            self.recent = []

    def write_transaction(self, lines: list[tuple[int, str, str]]) -> None:
        split_pending = self.opened == 1 and "split_transaction" not in self.stats.anomalies
        full = self.file_lines >= self.lines_per_file
        # The first file stays open past its size until a transaction straddles its end, so that
        # every landing zone holds a split transaction (unless the first file grows far too big).
        if self.fh is not None and full and (not split_pending or self.file_lines >= 3 * self.lines_per_file):
            self._rotate()
        split_here = (
            self.fh is not None and self.opened == 1 and self.file_lines + len(lines) > self.lines_per_file
        )
        cut = len(lines) // 2
        if (
            split_here
            and len(lines) >= 2
            and lines[cut][0] > self.first_lsn  # the second half's file needs a name of its own
            and "split_transaction" not in self.stats.anomalies
        ):
            for lsn, line, kind in lines[:cut]:
                self._write(lsn, line, kind)
            self._close()
            self.recent = []
            for lsn, line, kind in lines[cut:]:
                self._write(lsn, line, kind)
            self.stats.anomalies["split_transaction"] = f"{self.stats.files[-2]} -> {self.stats.files[-1]}"
            return
        for lsn, line, kind in lines:
            self._write(lsn, line, kind)
        self.recent.append(lines)
        del self.recent[: -self.REPLAY_TRANSACTIONS - 1]

    def write_malformed(self, lsn: int, lines: list[str]) -> None:
        for line in lines:
            self._write(lsn, line, "malformed")

    def close(self) -> None:
        self._close()


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def generate(
    out: Path,
    seed: int = 7,
    transactions: int = 80,
    formats: tuple[str, ...] = (WAL2JSON, DEBEZIUM),
    lines_per_file: int = 100,
    compress: bool = False,
    source_prefix: str = "shop",
    progress: bool = False,
) -> dict:
    """Write the landing zone under ``out`` and return the manifest (also ``out/manifest.json``)."""
    out.mkdir(parents=True, exist_ok=True)
    workload = Workload(seed, transactions)
    fmt_objs = {WAL2JSON: Wal2JsonFormat(), DEBEZIUM: DebeziumFormat(server=source_prefix)}
    sinks = {f: Sink(out / f"{source_prefix}_{f}", lines_per_file, compress) for f in formats}
    malformed_at = {int(transactions * f) for f in (0.35, 0.65)}
    started = time.monotonic()
    debezium_expected: dict | None = None
    last_lines: list = []
    for n, txn in enumerate(workload):
        if n == transactions - 1 and DEBEZIUM in sinks:
            # Without an END marker, Debezium's trailing transaction stays pending (nothing after it
            # proves it complete), so its expected state is the one before that transaction.
            debezium_expected = _state_before(workload.model, txn)
        for fmt, sink in sinks.items():
            if fmt == DEBEZIUM and n == workload.seed_transactions:
                snapshot_lsn = txn.changes[0].lsn - 0x10
                # The snapshot reads the state before this transaction: undo it on a copy.
                state = _state_before(workload.model, txn, as_model=True)
                sink.write_transaction(
                    fmt_objs[DEBEZIUM].snapshot(state, snapshot_lsn, txn.xid - 1, txn.commit_micros)
                )
                sink.stats.anomalies["snapshot"] = f"initial snapshot at LSN {format_lsn(snapshot_lsn)}"
            if fmt == DEBEZIUM and n < workload.seed_transactions:
                continue  # before the connector's snapshot
            if n in malformed_at:
                sink.write_malformed(txn.changes[0].lsn, fmt_objs[fmt].malformed(txn))
            lines = fmt_objs[fmt].render(txn)
            sink.write_transaction(lines)
            if fmt == DEBEZIUM:
                last_lines = lines
        if progress and n and n % 100_000 == 0:
            rate = n / (time.monotonic() - started)
            print(f"  {n:,} / {transactions:,} transactions ({rate:,.0f}/s)", file=sys.stderr, flush=True)
    manifest: dict = {"seed": seed, "transactions": transactions, "sources": {}}
    for fmt, sink in sinks.items():
        sink.close()
        state = workload.model.expected_state() if fmt == WAL2JSON else debezium_expected
        pending = len(last_lines) if fmt == DEBEZIUM else 0
        sink.stats.pending_lines = pending
        expected_path = sink.folder / EXPECTED_STATE
        _write_state(expected_path, state)
        s = sink.stats
        manifest["sources"][sink.folder.name] = {
            "format": fmt,
            "path": sink.folder.name,
            "files": sorted(s.files),
            "lines": s.lines,
            "changes_written": s.changes_written,
            "distinct_positions": s.distinct_positions,
            "duplicate_change_lines": s.duplicate_change_lines,
            "control_lines": s.control_lines,
            "malformed_lines": s.malformed_lines,
            "expected_rejects": s.malformed_lines,
            "pending_lines": s.pending_lines,
            "expected_state": f"{sink.folder.name}/{EXPECTED_STATE}",
            "expected_rows": {t: len(rows) for t, rows in state.items()},
            "anomalies": s.anomalies,
        }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _write_state(path: Path, state: dict[str, list[dict]]) -> None:
    """One row per line: readable, and written by the C encoder (``indent`` is pure Python)."""
    with open(path, "w") as fh:
        fh.write("{\n")
        for n, (table, rows) in enumerate(state.items()):
            fh.write(f" {json.dumps(table)}: [")
            fh.write(",".join("\n  " + json.dumps(row) for row in rows))
            fh.write("\n ]" + ("," if n < len(state) - 1 else "") + "\n")
        fh.write("}\n")


def _state_before(model: Model, txn: Transaction, as_model: bool = False):
    """The model as it was before ``txn`` (already applied to it): a copy with the undo log replayed.

    Used at most twice per run (the Debezium snapshot and the state behind its pending tail).
    """
    copy = Model({t: dict(rows) for t, rows in model.rows.items()})
    for table, key, row in reversed(txn.undo):
        if row is None:
            copy.rows[table].pop(key, None)
        else:
            copy.rows[table][key] = row
    return copy if as_model else copy.expected_state()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.sample_data", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="landing zone root (one folder per source)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--transactions", type=int, default=80, help="transactions to generate (>= 20)")
    parser.add_argument("--format", choices=[WAL2JSON, DEBEZIUM, "both"], default="both")
    parser.add_argument(
        "--lines-per-file",
        type=int,
        default=None,
        help="rotate files after this many lines (default: 100 for small runs, up to 200,000 for large)",
    )
    parser.add_argument("--gzip", action="store_true", help="write .jsonl.gz files")
    parser.add_argument("--source-prefix", default="shop", help="source folders are PREFIX_wal2json, ...")
    args = parser.parse_args(argv)
    formats = (WAL2JSON, DEBEZIUM) if args.format == "both" else (args.format,)
    started = time.monotonic()
    manifest = generate(
        args.out,
        seed=args.seed,
        transactions=args.transactions,
        formats=formats,
        lines_per_file=args.lines_per_file or max(100, min(200_000, args.transactions * 3 // 4)),
        compress=args.gzip,
        source_prefix=args.source_prefix,
        progress=args.transactions >= 200_000,
    )
    parts = [
        f"{name}: {s['changes_written']:,} changes ({s['distinct_positions']:,} distinct) "
        f"in {len(s['files'])} files, {s['malformed_lines']} malformed"
        for name, s in manifest["sources"].items()
    ]
    print(f"wrote {args.out} in {time.monotonic() - started:.1f}s: " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
