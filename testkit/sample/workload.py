"""The seeded shop workload: transactions over the model's tables, with every special case once.

Not to be confused with ``testkit.workload``, which drives a live Postgres: this one only builds
abstract transactions in memory for the sample's writers to render.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime

from testkit.sample.model import (
    CUSTOMERS,
    EPOCH,
    ORDER_ITEMS,
    ORDERS,
    W_DELETE,
    W_INSERT,
    W_TRUNCATE,
    W_UPDATE,
    Change,
    Model,
    Transaction,
)

# Postgres stores a text value out of line (TOAST) above roughly 2 kB; an UPDATE that does not
# touch such a value does not log it, so wal2json leaves the column out and Debezium sends the
# placeholder. Generated bios are either short or above this size.
TOAST_THRESHOLD = 2000

START_MICROS = int((datetime(2026, 11, 20, 8, 0, tzinfo=UTC) - EPOCH).total_seconds()) * 1_000_000
START_LSN = 0x1_5000_0000
START_XID = 1000

WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar "
    "papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
).split()
STATUSES = ["new", "paid", "packed", "shipped", "delivered", "cancelled"]


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
        self._undo: list = []  # the undo log of the transaction being generated
        self._key_cache: dict[str, tuple[list, int]] = {}

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
        entry = self._key_cache.get(table)
        rows = self.model.rows[table]
        if entry is None or entry[1] > 2 * len(rows) + 64 or len(rows) > 2 * entry[1] + 64:
            entry = (list(rows), len(rows))
            self._key_cache[table] = entry
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
            self._undo = []
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
