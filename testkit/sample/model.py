"""The shop's three tables and the in-memory model of their rows.

Values in the model: ``int`` for integers, ``str`` for text, ``int`` cents for ``numeric(12,2)``,
``int`` microseconds since the epoch for ``timestamptz``, ``None`` for NULL. Each writer renders
them in its own tool's form; ``Model.expected_state`` renders them as ``to_jsonb`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

# The model's change kinds carry wal2json's action codes.
W_INSERT, W_UPDATE, W_DELETE, W_TRUNCATE = "I", "U", "D", "T"

BIGINT, INTEGER, TEXT, NUMERIC, TIMESTAMPTZ = (
    "bigint",
    "integer",
    "text",
    "numeric(12,2)",
    "timestamp with time zone",
)

CUSTOMERS, ORDERS, ORDER_ITEMS = "customers", "orders", "order_items"
SCHEMA = "public"

# table -> ([(column, type)], key columns)
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


def fraction(micros: int) -> str:
    """Postgres prints fractional seconds with trailing zeros dropped, and none when zero."""
    frac = micros % 1_000_000
    return "" if frac == 0 else "." + f"{frac:06d}".rstrip("0")


def whole_seconds(micros: int) -> datetime:
    """The UTC time of ``micros`` without its fraction, which ``fraction`` prints."""
    return EPOCH + timedelta(microseconds=micros - micros % 1_000_000)


def numeric_text(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d}"


def jsonb_timestamptz(micros: int) -> str:
    """timestamptz as ``to_jsonb`` renders it in UTC."""
    return whole_seconds(micros).strftime("%Y-%m-%dT%H:%M:%S") + fraction(micros) + "+00:00"


def jsonb_value(kind: str, value):
    """A model value as ``to_jsonb`` gives it (numeric as a JSON number, as in the fixture)."""
    if value is None:
        return None
    if kind == NUMERIC:
        return value / 100
    if kind == TIMESTAMPTZ:
        return jsonb_timestamptz(value)
    return value


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

    def before(self, txn: Transaction) -> Model:
        """The model as it was before ``txn`` (already applied to it): a copy with the undo log replayed.

        Used at most twice per run (the Debezium snapshot and the state behind its pending tail).
        """
        copy = Model({t: dict(rows) for t, rows in self.rows.items()})
        for table, key, row in reversed(txn.undo):
            if row is None:
                copy.rows[table].pop(key, None)
            else:
                copy.rows[table][key] = row
        return copy

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
