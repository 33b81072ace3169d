"""A seeded random workload against a live Postgres, for capture tests and the soak script.

    python -m testkit.workload --dsn "dbname=soak_1" --seed 1 --transactions 300 --sessions 4

It creates (or recreates) seven tables in ``--schema`` with different key shapes and replica
identities, then runs transactions from several concurrent sessions (one thread and connection
each). The seed drives every choice; the interleaving of sessions does not repeat exactly, and a
transaction that hits a deadlock, lock timeout or key conflict rolls back (which Postgres does not
decode, so the oracle never sees it).

Tables:
- ``accounts``: bigint key, a TOASTed ``note`` (random md5 hex, 5-12 KB, stored out of line), numeric,
  boolean, timestamptz, jsonb; default replica identity, so updates that leave ``note`` alone omit it.
- ``tags``: text key, double precision, timestamptz; ``REPLICA IDENTITY FULL``.
- ``memberships``: composite key declared as ``(team, account_id)`` while ``account_id`` is the
  first column (wal2json lists key columns in column order); date, integer.
- ``documents``: integer key, a TOASTed ``body``, ``REPLICA IDENTITY FULL``.
- ``devices``: bigint key, ``REPLICA IDENTITY USING INDEX`` on the unique ``serial``: an update's or
  delete's identity holds the serial, not the key.
- ``readings``: no primary key, ``REPLICA IDENTITY FULL``; the same row may exist twice.
- ``gauges``: NaN and infinities in numeric, real and double precision, written with the initial
  rows and never touched again: wal2json streams them as null, only a snapshot carries them.

The edges (``create_edges``, ``edge_rows``, ``edge_changes``; the soak and the oracle run them, the
sessions never touch these tables), for the typed mirrors: values a mirror must hold exactly or list
in ``mirror_rejects``, and DDL in the middle of the stream:
- ``Order.Lines`` in the schema ``Sales Dept``: a schema with a space, a table with a dot, columns
  ``Order Id``, ``Qty "x"`` (a quote in the name) and ``unit.price``. After the snapshot:
  ``unit.price`` goes from ``numeric(12,2)`` to ``numeric(12,4)`` (then 1.2345 and 0.0001 arrive),
  ``Added Col`` is added as ``integer`` and widened to ``bigint``, and ``Qty "x"`` is renamed
  ``Qty "y"`` (the stream carries none of this DDL; ``SCHEMA_CHANGES`` says what each column was
  sent as).
- ``edge_values``: BC dates, ``jsonb[]`` of objects, ``text[]`` with NULLs, quotes and commas,
  ``integer[]`` with NULLs.
- ``edge_text_only``: ``infinity`` and ``-infinity`` dates and multi-dimensional arrays, which only
  Postgres' text carries (a Debezium rendering leaves the table out: its ``Date`` is a day number,
  its arrays have one dimension).

Operations: inserts, updates of a few columns (TOASTed column untouched), updates of the TOASTed
column, several touches of one row in one transaction, delete as the last touch, delete then
re-insert, primary-key updates, key chains (A->B->C, A->B->A) and swaps of rows with a TOASTed
value they leave alone, truncates of one table and of several in one statement, NULLs, logical
messages inside a transaction, and non-transactional messages (heartbeats) emitted by another
connection just before a transaction commits: wal2json reports such a message at the LSN where the
commit record starts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import psycopg
from psycopg import errors, sql
from psycopg.types.json import Jsonb

TABLES = ("accounts", "tags", "memberships", "documents", "devices", "readings")
# Tables without a primary key: no record identity, so consumer_records leaves them out.
KEYLESS_TABLES = ("readings",)
TEAMS = ("core", "web", "ops", "data", "sales")
ACCOUNT_KEYS = 60
TAG_KEYS = 40
DOCUMENT_KEYS = 25
DEVICE_KEYS = 30
MESSAGE_PREFIX = "wal_lake.workload"

DDL = """
create table {schema}.accounts (
    id bigint primary key,
    email text not null,
    note text,
    balance numeric(12, 2),
    active boolean,
    updated_at timestamptz,
    meta jsonb
);
create table {schema}.tags (
    code text primary key,
    label text,
    weight double precision,
    created_at timestamptz not null
);
alter table {schema}.tags replica identity full;
create table {schema}.memberships (
    account_id bigint not null,
    team text not null,
    role text,
    since date,
    score integer,
    primary key (team, account_id)
);
create table {schema}.documents (
    id integer primary key,
    title text not null,
    body text,
    version integer not null default 1
);
alter table {schema}.documents replica identity full;
create table {schema}.devices (
    id bigint primary key,
    serial text not null,
    name text,
    seen_at timestamptz
);
create unique index devices_serial on {schema}.devices (serial);
alter table {schema}.devices replica identity using index devices_serial;
create table {schema}.readings (
    sensor text not null,
    value numeric,
    taken_at timestamptz
);
alter table {schema}.readings replica identity full;
create table {schema}.gauges (
    id integer primary key,
    level real,
    reading double precision,
    ratio numeric
);
"""
GAUGES = """
insert into {s}.gauges values
    (1, 'NaN', 'Infinity', '-Infinity'),
    (2, '-Infinity', 'NaN', 'Infinity'),
    (3, 'Infinity', '-Infinity', 'NaN'),
    (4, 1.5, -0.25, 10.50),
    (5, null, null, null)
"""

# The edge tables ("schema.table"; the schema name has no dot, the table name may).
EDGE_SCHEMA = "Sales Dept"
ODD_TABLE = f"{EDGE_SCHEMA}.Order.Lines"
EDGE_TABLES = (ODD_TABLE, "public.edge_values", "public.edge_text_only")
# Only Postgres' text carries these values (infinite dates, arrays of more than one dimension).
TEXT_ONLY_TABLES = ("public.edge_text_only",)
EDGE_DDL = '''
create schema "Sales Dept";
create table "Sales Dept"."Order.Lines" (
    "Order Id" integer primary key,
    "Qty ""x""" integer,
    "unit.price" numeric(12, 2)
);
create table public.edge_values (
    id integer primary key,
    day date,
    docs jsonb[],
    tags text[],
    grid integer[]
);
create table public.edge_text_only (
    id integer primary key,
    day date,
    grid integer[]
);
'''
EDGE_ROWS = """
insert into "Sales Dept"."Order.Lines" values (1, 5, 10.50), (2, 6, 0.01), (3, null, -7.25), (4, 8, null);
insert into public.edge_values values
    (1, '0044-03-15 BC', array['{"a": 1, "b": {"c": [1, 2]}}', '{"s": "x,y"}']::jsonb[],
        array['plain', null, 'say "hi"', 'a,b', '{x}', 'NULL', ''], '{1,NULL,3}'),
    (2, '2026-01-01', array['{"n": 1.50}', null]::jsonb[], '{}', '{NULL}'),
    (3, '0001-01-01 BC', '{}', null, '{}'),
    (4, null, null, array['only'], '{-2147483648,2147483647}');
insert into public.edge_text_only values
    (1, 'infinity', '{{1,2},{3,4}}'),
    (2, '-infinity', '{{{1}},{{NULL}}}'),
    (3, '2026-02-03', '{5,NULL}');
"""
# In the middle of the stream, each statement in a transaction of its own (a DDL statement is one
# too): the column's type changes between the changes that send it. The renamed column is never set
# to null after its rename (the contract reads a row's value as coalesce(new, old): a row not touched
# since the rename holds the old name only).
EDGE_CHANGES = (
    """insert into "Sales Dept"."Order.Lines" values (5, 9, 99999999.99)""",
    """alter table "Sales Dept"."Order.Lines" alter column "unit.price" type numeric(12, 4)""",
    """insert into "Sales Dept"."Order.Lines" values (6, 1, 1.2345), (7, 2, 0.0001)""",
    """update "Sales Dept"."Order.Lines" set "unit.price" = 3.1416 where "Order Id" = 1""",
    """alter table "Sales Dept"."Order.Lines" add column "Added Col" integer""",
    """insert into "Sales Dept"."Order.Lines" values (8, 3, 2.5, 7)""",
    """update "Sales Dept"."Order.Lines" set "Added Col" = 42 where "Order Id" = 2""",
    """alter table "Sales Dept"."Order.Lines" alter column "Added Col" type bigint""",
    """insert into "Sales Dept"."Order.Lines" values (9, 4, 0.5, 1099511627776)""",
    """update "Sales Dept"."Order.Lines" set "Added Col" = -1099511627776 where "Order Id" = 8""",
    'alter table "Sales Dept"."Order.Lines" rename column "Qty ""x""" to "Qty ""y"""',
    'update "Sales Dept"."Order.Lines" set "Qty ""y""" = 101 where "Order Id" in (1, 6)',
    """insert into "Sales Dept"."Order.Lines" values (10, 11, 12.3456, null)""",
    """delete from "Sales Dept"."Order.Lines" where "Order Id" = 7""",
    """update public.edge_values set day = '2026-03-15' where id = 3""",
    """update public.edge_values set day = '0100-01-01 BC', grid = '{7,NULL}' where id = 2""",
    """insert into public.edge_values values
        (5, '1999-12-31', array['{"k": [{"x": null}]}']::jsonb[], array['z', null], '{NULL,NULL}')""",
    """delete from public.edge_values where id = 4""",
    """update public.edge_text_only set grid = '{9}' where id = 1""",
    """insert into public.edge_text_only values (4, 'infinity', '{{7}}')""",
)
# What the edge DDL does to the columns of a table, for the comparisons: the types each column was
# sent with, in order (the capture sends each change's types; nothing announces the DDL), the
# columns added after rows were written (absent from a row not touched since: null in the table),
# and the columns renamed (new name -> old name).
SCHEMA_CHANGES = {
    ODD_TABLE: {
        "types_sent": {
            "Order Id": ["integer"],
            'Qty "x"': ["integer"],
            "unit.price": ["numeric(12,2)", "numeric(12,4)"],
            "Added Col": ["integer", "bigint"],
            'Qty "y"': ["integer"],
        },
        "added": ["Added Col"],
        "renamed": {'Qty "y"': 'Qty "x"'},
    }
}

RETRYABLE = (
    errors.DeadlockDetected,
    errors.LockNotAvailable,
    errors.UniqueViolation,
    errors.SerializationFailure,
    errors.QueryCanceled,
)


@dataclass
class Stats:
    committed: int = 0
    rolled_back: int = 0
    statements: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def big_text(rng: random.Random) -> str:
    """5-12 KB of md5 hex from the seeded generator: too big and random to stay inline after compression."""
    size = rng.randint(5_000, 12_000)
    chunks, state = [], rng.getrandbits(64)
    while sum(len(c) for c in chunks) < size:
        state = rng.getrandbits(64)
        chunks.append(hashlib.md5(str(state).encode()).hexdigest())
    return "".join(chunks)[:size]


def create_tables(conn: psycopg.Connection, schema: str) -> None:
    conn.execute(sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(schema)))
    conn.execute(sql.SQL("create schema {}").format(sql.Identifier(schema)))
    conn.execute(DDL.format(schema=sql.Identifier(schema).as_string(conn)))


class Session:
    """One client: its own connection and its own random stream derived from the seed."""

    def __init__(self, dsn: str, schema: str, rng: random.Random, stats: Stats) -> None:
        self.conn = psycopg.connect(dsn)
        self.conn.execute("set lock_timeout = '2s'")
        self.conn.commit()
        # Heartbeats come from another connection: outside any transaction, so non-transactional.
        self.side = psycopg.connect(dsn, autocommit=True)
        self.schema = schema
        self.rng = rng
        self.stats = stats
        self.base_time = datetime(2026, 1, 1, tzinfo=UTC)

    # --- values ----------------------------------------------------------------------------------

    def maybe_null(self, value, probability: float = 0.15):
        return None if self.rng.random() < probability else value

    def timestamp(self) -> datetime:
        return self.base_time + timedelta(
            seconds=self.rng.randint(0, 86_400 * 400), microseconds=self.rng.randint(0, 999_999)
        )

    def account_values(self, key: int) -> dict:
        rng = self.rng
        return {
            "id": key,
            "email": f"user{key}.{rng.randint(0, 999)}@example.com",
            "note": big_text(rng)
            if rng.random() < 0.5
            else self.maybe_null(f"short note {rng.randint(0, 99)}", 0.5),
            "balance": self.maybe_null(Decimal(rng.randint(-100_000, 10_000_000)) / 100),
            "active": self.maybe_null(rng.random() < 0.5),
            "updated_at": self.maybe_null(self.timestamp()),
            "meta": self.maybe_null(
                Jsonb(
                    {
                        "plan": rng.choice(["free", "pro"]),
                        "seats": rng.randint(1, 50),
                        "ratio": rng.randint(0, 1000) / 8,
                    }
                ),
                0.4,
            ),
        }

    # --- statements ------------------------------------------------------------------------------

    def x(self, query: str, params=()) -> int:
        cursor = self.conn.execute(sql.SQL(query).format(s=sql.Identifier(self.schema)), params)
        self.stats.statements += 1
        return cursor.rowcount

    def upsert_account(self, key: int) -> None:
        v = self.account_values(key)
        self.x(
            "insert into {s}.accounts (id, email, note, balance, active, updated_at, meta)"
            " values (%(id)s, %(email)s, %(note)s, %(balance)s, %(active)s, %(updated_at)s, %(meta)s)"
            " on conflict (id) do update set email = excluded.email, balance = excluded.balance",
            v,
        )

    def op_insert(self) -> None:
        rng = self.rng
        table = rng.choice(TABLES)
        if table == "accounts":
            self.upsert_account(rng.randint(1, ACCOUNT_KEYS))
        elif table == "tags":
            self.x(
                "insert into {s}.tags (code, label, weight, created_at) values (%s, %s, %s, %s)"
                " on conflict (code) do nothing",
                (
                    f"tag-{rng.randint(1, TAG_KEYS)}",
                    self.maybe_null(f"Label {rng.randint(0, 999)}"),
                    self.maybe_null(rng.randint(-10_000, 10_000) / 7),
                    self.timestamp(),
                ),
            )
        elif table == "memberships":
            self.x(
                "insert into {s}.memberships (account_id, team, role, since, score)"
                " values (%s, %s, %s, %s, %s) on conflict do nothing",
                (
                    rng.randint(1, ACCOUNT_KEYS),
                    rng.choice(TEAMS),
                    self.maybe_null(rng.choice(["owner", "admin", "member"])),
                    self.maybe_null(self.timestamp().date()),
                    self.maybe_null(rng.randint(-5, 500)),
                ),
            )
        elif table == "documents":
            self.x(
                "insert into {s}.documents (id, title, body) values (%s, %s, %s) on conflict (id) do nothing",
                (rng.randint(1, DOCUMENT_KEYS), f"doc {rng.randint(0, 999)}", big_text(rng)),
            )
        elif table == "devices":
            self.x(
                "insert into {s}.devices (id, serial, name, seen_at) values (%s, %s, %s, %s)"
                " on conflict do nothing",
                (
                    rng.randint(1, DEVICE_KEYS),
                    f"sn-{rng.randint(1, DEVICE_KEYS * 3)}",
                    self.maybe_null(f"device {rng.randint(0, 99)}"),
                    self.maybe_null(self.timestamp()),
                ),
            )
        else:
            reading = (self.sensor(), self.maybe_null(Decimal(rng.randint(-999, 999)) / 10), self.timestamp())
            # Sometimes twice: a table without a key may hold equal rows.
            for _ in range(2 if rng.random() < 0.2 else 1):
                self.x("insert into {s}.readings (sensor, value, taken_at) values (%s, %s, %s)", reading)

    def sensor(self) -> str:
        return f"sensor-{self.rng.randint(1, 6)}"

    def op_update(self) -> None:
        """Update a few columns, leaving any TOASTed column alone."""
        rng = self.rng
        table = rng.choice(TABLES)
        if table == "accounts":
            self.x(
                "update {s}.accounts set balance = %s, active = %s, updated_at = %s where id = %s",
                (
                    self.maybe_null(Decimal(rng.randint(0, 100_000)) / 100),
                    self.maybe_null(rng.random() < 0.5),
                    self.timestamp(),
                    rng.randint(1, ACCOUNT_KEYS),
                ),
            )
        elif table == "tags":
            self.x(
                "update {s}.tags set weight = %s where code = %s",
                (self.maybe_null(rng.random() * 1000), f"tag-{rng.randint(1, TAG_KEYS)}"),
            )
        elif table == "memberships":
            self.x(
                "update {s}.memberships set score = coalesce(score, 0) + 1, role = %s where account_id = %s",
                (self.maybe_null(rng.choice(["owner", "member"])), rng.randint(1, ACCOUNT_KEYS)),
            )
        elif table == "documents":
            self.x(
                "update {s}.documents set version = version + 1, title = %s where id = %s",
                (f"doc {rng.randint(0, 999)}", rng.randint(1, DOCUMENT_KEYS)),
            )
        elif table == "devices":
            self.x(
                "update {s}.devices set name = %s, seen_at = %s where id = %s",
                (
                    self.maybe_null(f"device {rng.randint(0, 99)}"),
                    self.timestamp(),
                    rng.randint(1, DEVICE_KEYS),
                ),
            )
        else:
            self.x(
                "update {s}.readings set value = %s"
                " where ctid = (select ctid from {s}.readings where sensor = %s limit 1)",
                (self.maybe_null(Decimal(rng.randint(-999, 999)) / 10), self.sensor()),
            )

    def op_update_toast(self) -> None:
        rng = self.rng
        if rng.random() < 0.5:
            self.x(
                "update {s}.accounts set note = %s where id = %s",
                (self.maybe_null(big_text(rng), 0.2), rng.randint(1, ACCOUNT_KEYS)),
            )
        else:
            self.x(
                "update {s}.documents set body = %s, version = version + 1 where id = %s",
                (big_text(rng), rng.randint(1, DOCUMENT_KEYS)),
            )

    def op_multi_touch(self) -> None:
        """Several touches of one row in one transaction, sometimes ending in a delete."""
        rng = self.rng
        key = rng.randint(1, ACCOUNT_KEYS)
        self.upsert_account(key)
        for _ in range(rng.randint(1, 3)):
            self.x(
                "update {s}.accounts set balance = coalesce(balance, 0) + %s where id = %s",
                (Decimal(rng.randint(1, 999)) / 100, key),
            )
        if rng.random() < 0.4:
            self.x("delete from {s}.accounts where id = %s", (key,))

    def op_delete(self) -> None:
        rng = self.rng
        table = rng.choice(TABLES)
        if table == "accounts":
            self.x("delete from {s}.accounts where id = %s", (rng.randint(1, ACCOUNT_KEYS),))
        elif table == "tags":
            self.x("delete from {s}.tags where code = %s", (f"tag-{rng.randint(1, TAG_KEYS)}",))
        elif table == "memberships":
            self.x(
                "delete from {s}.memberships where account_id = %s and team = %s",
                (rng.randint(1, ACCOUNT_KEYS), rng.choice(TEAMS)),
            )
        elif table == "documents":
            self.x("delete from {s}.documents where id = %s", (rng.randint(1, DOCUMENT_KEYS),))
        elif table == "devices":
            self.x("delete from {s}.devices where id = %s", (rng.randint(1, DEVICE_KEYS),))
        else:
            self.x(
                "delete from {s}.readings"
                " where ctid = (select ctid from {s}.readings where sensor = %s limit 1)",
                (self.sensor(),),
            )

    def op_delete_reinsert(self) -> None:
        rng = self.rng
        if rng.random() < 0.5:
            key = rng.randint(1, ACCOUNT_KEYS)
            self.x("delete from {s}.accounts where id = %s", (key,))
            self.upsert_account(key)
        else:
            code = f"tag-{rng.randint(1, TAG_KEYS)}"
            self.x("delete from {s}.tags where code = %s", (code,))
            self.x(
                "insert into {s}.tags (code, label, weight, created_at) values (%s, %s, %s, %s)",
                (code, "reborn", rng.random(), self.timestamp()),
            )

    def op_pk_update(self) -> None:
        rng = self.rng
        choice = rng.random()
        if choice < 0.4:
            self.x(
                "update {s}.accounts set id = %s where id = %s",
                (rng.randint(1, ACCOUNT_KEYS), rng.randint(1, ACCOUNT_KEYS)),
            )
        elif choice < 0.6:
            self.x(
                "update {s}.tags set code = %s, label = 'renamed' where code = %s",
                (f"tag-{rng.randint(1, TAG_KEYS)}", f"tag-{rng.randint(1, TAG_KEYS)}"),
            )
        elif choice < 0.75:
            # The identity is the serial: a key change whose identity does not hold the old key.
            self.x(
                "update {s}.devices set id = %s where id = %s",
                (rng.randint(1, DEVICE_KEYS), rng.randint(1, DEVICE_KEYS)),
            )
        elif choice < 0.85:
            self.x(
                "update {s}.devices set serial = %s where id = %s",
                (f"sn-{rng.randint(1, DEVICE_KEYS * 3)}", rng.randint(1, DEVICE_KEYS)),
            )
        else:
            self.x(
                "update {s}.memberships set team = %s where account_id = %s and team = %s",
                (rng.choice(TEAMS), rng.randint(1, ACCOUNT_KEYS), rng.choice(TEAMS)),
            )

    def toasted_accounts(self) -> list[int]:
        """Accounts whose note is stored out of line, in key order (the seeded choice picks one)."""
        rows = self.conn.execute(
            sql.SQL("select id from {s}.accounts where length(note) > 4000 order by id").format(
                s=sql.Identifier(self.schema)
            )
        ).fetchall()
        return [row[0] for row in rows]

    def op_key_chain(self) -> None:
        """A -> B -> C, or A -> B -> A, in one transaction; the TOASTed note is never sent again."""
        rng = self.rng
        candidates = self.toasted_accounts()
        if not candidates:
            return
        first = rng.choice(candidates)
        second = rng.randint(1, ACCOUNT_KEYS + 20)
        last = first if rng.random() < 0.5 else rng.randint(1, ACCOUNT_KEYS + 20)
        self.x("update {s}.accounts set id = %s where id = %s", (second, first))
        if rng.random() < 0.5:
            self.x(
                "update {s}.accounts set balance = %s where id = %s", (Decimal(rng.randint(0, 999)), second)
            )
        self.x(
            "update {s}.accounts set id = %s, active = %s where id = %s", (last, rng.random() < 0.5, second)
        )

    def op_key_swap(self) -> None:
        """Two rows trade keys through a third, neither sending its TOASTed note."""
        rng = self.rng
        candidates = self.toasted_accounts()
        if len(candidates) < 2:
            return
        a, b = rng.sample(candidates, 2)
        self.x("update {s}.accounts set id = %s where id = %s", (-a, a))
        self.x("update {s}.accounts set id = %s where id = %s", (a, b))
        self.x("update {s}.accounts set id = %s where id = %s", (b, -a))

    def op_truncate(self) -> None:
        tables = self.rng.choice(
            [["tags"], ["memberships"], ["tags", "memberships"], ["readings", "devices"]]
        )
        self.x("truncate " + ", ".join(f"{{s}}.{table}" for table in tables))

    def op_message(self) -> None:
        self.x(
            "select pg_logical_emit_message(true, %s, %s)",
            (MESSAGE_PREFIX, f"in transaction {self.rng.randint(0, 999)}"),
        )

    def heartbeat(self) -> None:
        self.side.execute(
            "select pg_logical_emit_message(false, %s, %s)",
            (MESSAGE_PREFIX, f"beat {self.rng.randint(0, 999)}"),
        )

    OPERATIONS = (
        (op_insert, 30),
        (op_update, 25),
        (op_update_toast, 8),
        (op_multi_touch, 10),
        (op_delete, 12),
        (op_delete_reinsert, 6),
        (op_pk_update, 6),
        (op_key_chain, 4),
        (op_key_swap, 2),
        (op_truncate, 1),
        (op_message, 2),
    )

    def transaction(self) -> None:
        rng = self.rng
        operations, weights = zip(*self.OPERATIONS, strict=True)
        try:
            for _ in range(rng.randint(1, 5)):
                rng.choices(operations, weights)[0](self)
            if rng.random() < 0.2:
                # Right before the commit: the message and the commit record are likely neighbours.
                self.heartbeat()
            self.conn.commit()
            with self.stats.lock:
                self.stats.committed += 1
        except RETRYABLE:
            self.conn.rollback()
            with self.stats.lock:
                self.stats.rolled_back += 1

    def close(self) -> None:
        self.conn.close()
        self.side.close()


def create_edges(conn: psycopg.Connection) -> None:
    """The edge tables (``EDGE_TABLES``) in a fresh database, with their first rows."""
    conn.execute(sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(EDGE_SCHEMA)))
    conn.execute("drop table if exists public.edge_values, public.edge_text_only")
    conn.execute(EDGE_DDL)
    conn.execute(EDGE_ROWS)


def edge_changes(dsn: str) -> None:
    """The edge tables' changes and DDL (``EDGE_CHANGES``), each committed on its own."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in EDGE_CHANGES:
            conn.execute(statement)


def seed_rows(dsn: str, schema: str, seed: int, rows: int = 30) -> None:
    """Some rows before any session starts, so that early updates and deletes find something; with
    them (``rows`` > 0), the ``gauges`` rows."""
    stats = Stats()
    session = Session(dsn, schema, random.Random(f"{seed}-initial"), stats)
    try:
        for _ in range(rows):
            session.op_insert()
        if rows:
            session.x(GAUGES)
        session.conn.commit()
    finally:
        session.close()


def run_workload(
    dsn: str,
    seed: int,
    transactions: int,
    sessions: int = 4,
    schema: str = "public",
    create: bool = True,
    initial_rows: int = 30,
) -> Stats:
    """Create the tables (unless ``create`` is false) and run ``transactions`` across ``sessions``."""
    if create:
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_tables(conn, schema)
        seed_rows(dsn, schema, seed, initial_rows)
    stats = Stats()
    clients = [Session(dsn, schema, random.Random(f"{seed}-{index}"), stats) for index in range(sessions)]
    share = [
        transactions // sessions + (1 if index < transactions % sessions else 0) for index in range(sessions)
    ]
    failures: list[BaseException] = []

    def work(client: Session, count: int) -> None:
        try:
            for _ in range(count):
                client.transaction()
        except BaseException as exc:  # surfaced below: a thread's crash must fail the run
            failures.append(exc)

    threads = [
        threading.Thread(target=work, args=(c, n), daemon=True) for c, n in zip(clients, share, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients:
        client.close()
    if failures:
        raise failures[0]
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.workload",
        description="Run a seeded random workload (inserts, updates, deletes, key changes, truncates, "
        "TOASTed values) against a live Postgres from several concurrent sessions.",
    )
    parser.add_argument("--dsn", default="", help="libpq connection string (default: the PG* environment)")
    parser.add_argument(
        "--seed", type=int, default=1, help="drives every random choice (default: %(default)s)"
    )
    parser.add_argument(
        "--transactions", type=int, default=200, help="transactions to run (default: %(default)s)"
    )
    parser.add_argument("--sessions", type=int, default=4, help="concurrent sessions (default: %(default)s)")
    parser.add_argument("--schema", default="public", help="schema of the tables (default: %(default)s)")
    parser.add_argument(
        "--no-create", action="store_true", help="reuse existing tables instead of recreating them"
    )
    args = parser.parse_args(argv)
    try:
        stats = run_workload(
            args.dsn, args.seed, args.transactions, args.sessions, args.schema, not args.no_create
        )
    except psycopg.OperationalError as exc:
        print(f"workload: error: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                "seed": args.seed,
                "committed": stats.committed,
                "rolled_back": stats.rolled_back,
                "statements": stats.statements,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
