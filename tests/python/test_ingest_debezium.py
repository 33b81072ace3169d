"""The Debezium transform on hand-written Debezium 2.x Postgres events, one rule per test.

Every scenario is its own source_id in one input DataFrame, so the transform runs once for the module
(plus once without a registry, and once over a generated landing zone); each test reads its source.
Events follow what the Postgres connector emits with the JSON converter: ``source`` with version,
connector, name, ts_ms, snapshot, db, sequence (``["<last commit LSN>","<event LSN>"]``), schema,
table, txId, lsn, xmin; then op, ts_ms, before, after and transaction.
"""

from __future__ import annotations

import base64
import io
import json
from collections import defaultdict
from datetime import UTC, datetime

import pytest

from python_jobs.ingest import cli, debezium, debezium_envelope, job, table_keys
from python_jobs.ingest.changeset import EVENTS_SCHEMA, LINES_SCHEMA, PENDING_SCHEMA, REJECTS_SCHEMA
from python_jobs.ingest.ledger import EVENTS
from testkit import sample

SOURCE = "shop_debezium"
TS_MS = 1_795_132_800_123  # 2026-11-20 21:20:00.123 UTC
UNAVAILABLE = "__debezium_unavailable_value"

# Transactions of the examples: (previous commit LSN, txId). Commit LSNs grow in commit order.
T1 = (24_000_000, 701)
T2 = (24_001_000, 702)
T3 = (24_002_000, 703)
T4 = (24_003_000, 704)


def source_block(table, lsn, txid, last_commit, snapshot="false", schema="public", ts_ms=TS_MS):
    seq0 = None if last_commit is None else str(last_commit)
    return {
        "version": "2.7.3.Final",
        "connector": "postgresql",
        "name": "shop",
        "ts_ms": ts_ms,
        "snapshot": snapshot,
        "db": "shop",
        "sequence": json.dumps([seq0, str(lsn)]),
        "ts_us": ts_ms * 1000,
        "ts_ns": ts_ms * 1_000_000,
        "schema": schema,
        "table": table,
        "txId": txid,
        "lsn": lsn,
        "xmin": None,
    }


def value(op, txn, lsn, table="customers", before=None, after=None, snapshot="false", total_order=None):
    last_commit, txid = txn if txn else (None, None)
    val = {
        "before": before,
        "after": after,
        "source": source_block(table, lsn, txid, last_commit, snapshot),
        "transaction": None,
        "op": op,
        "ts_ms": TS_MS + 7,
    }
    if total_order is not None:
        val["transaction"] = {
            "id": f"{txid}:{last_commit}",
            "total_order": total_order,
            "data_collection_order": total_order,
        }
    return val


def with_schema(payload: dict, name: str) -> dict:
    """The JSON converter's ``schemas.enable=true`` wrapper (schema abridged to its shape)."""
    fields = [{"type": "string", "optional": True, "field": k} for k in payload if k != "source"]
    return {
        "schema": {"type": "struct", "fields": fields, "optional": False, "name": name},
        "payload": payload,
    }


def field(name: str, connect: str, optional: bool = True, semantic: str | None = None, **parameters) -> dict:
    """One column's Connect field schema, as the Postgres connector writes it."""
    schema = {"type": connect, "optional": optional, "field": name}
    if semantic:
        schema |= {"name": semantic, "version": 1}
    if parameters:
        schema["parameters"] = {PARAMETERS.get(k, k): v for k, v in parameters.items()}
    return schema


PARAMETERS = {
    "precision": "connect.decimal.precision",
    "source_type": debezium_envelope.SOURCE_COLUMN_TYPE,
    "source_length": debezium_envelope.SOURCE_COLUMN_LENGTH,
    "source_scale": debezium_envelope.SOURCE_COLUMN_SCALE,
}
# A table of every kind of column the connector types (propagated source types on some columns).
TYPED_FIELDS = [
    field("id", "int64", optional=False),
    field("qty", "int32"),
    field("small", "int16"),
    field("price", "bytes", semantic=debezium_envelope.DECIMAL, scale="2", precision="12"),
    field("total", "string", source_type="NUMERIC", source_length="14", source_scale="3"),
    field("at", "string", semantic="io.debezium.time.ZonedTimestamp"),
    field("local_at", "int64", semantic="io.debezium.time.MicroTimestamp"),
    field("day", "int32", semantic="io.debezium.time.Date"),
    {"type": "array", "optional": True, "items": {"type": "string", "optional": True}, "field": "tags"},
    field("doc", "string", semantic="io.debezium.data.Json"),
    field("blob", "bytes"),
]


def typed_value(after: dict) -> dict:
    """A create of ``public.typed`` in the schema wrapper, with the row's full Connect schema."""
    row = {"type": "struct", "optional": True, "name": "shop.public.typed.Value", "fields": TYPED_FIELDS}
    payload = value("c", T1, 24_000_100, table="typed", after=after)
    envelope = [
        {**row, "field": "before"},
        {**row, "field": "after"},
        {
            "type": "struct",
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "fields": [],
            "field": "source",
        },
        {"type": "string", "optional": False, "field": "op"},
    ]
    schema = {"type": "struct", "optional": False, "name": "shop.public.typed.Envelope", "fields": envelope}
    return {"schema": schema, "payload": payload}


TYPED_ROW = {
    "id": 1,
    "qty": 2,
    "small": 3,
    "price": "BNI=",
    "total": "1.500",
    "at": "2026-01-01T10:00:00Z",
    "local_at": 1767261600123456,
    "day": 20454,
    "tags": ["a", None],
    "doc": '{"k":1}',
    "blob": "CgtG",
}


def keyed(key: dict | None, val: dict | None) -> dict:
    return {"key": key, "value": val}


def customer(cid, email="a@example.com", bio=None, balance="10.50"):
    return {"id": cid, "email": email, "bio": bio, "balance": balance, "updated_at": "2026-01-01T00:00:00Z"}


FILE = "0000000001700000.jsonl"


def closer(lsn=24_009_000):
    """A later transaction: it proves every transaction before it complete (and is itself pending)."""
    return value("c", (lsn - 500, 799), lsn, after=customer(999))


def _missing(field, setting=None, delete=False):
    v = value("c", T1, 24_000_100, after=customer(1))
    if delete:
        del v["source"][field]
    else:
        v["source"][field] = setting
    return json.dumps(v)


def _snapshot(rows, lsn=23_900_000, last=True):
    out = []
    for n, (table, after) in enumerate(rows):
        flag = "first" if n == 0 else "last" if n == len(rows) - 1 and last else "true"
        out.append(value("r", (None, 690), lsn, table=table, after=after, snapshot=flag))
    return out


def _bare_value():
    v = value("c", T1, 24_000_100, after=customer(1, bio='{"nested": [1, 2.50]}', balance=None))
    v["after"]["score"] = 10.50  # a JSON number keeps its text: json.dumps writes 10.5, so patch it
    return json.dumps(v, separators=(",", ":")).replace('"score":10.5', '"score":10.50')


def _composite_key_line(wrapped: bool):
    key = {"order_id": 7, "line_no": 2}
    val = value("c", T1, 24_000_100, table="order_items", after={"order_id": 7, "line_no": 2, "sku": "SKU-1"})
    if wrapped:
        key = with_schema(key, "shop.public.order_items.Key")
        val = with_schema(val, "shop.public.order_items.Envelope")
    return keyed(key, val)


UNKNOWN_KEY_LINE = json.dumps(value("c", T1, 24_000_100, table="orders", after={"id": 1, "status": "new"}))
REJECTED = [
    '{"before":null,"after":{"id":1}',
    "",
    json.dumps(value("x", T1, 24_000_100, after=customer(1))),
    json.dumps({"hello": "world"}),
    _missing("lsn", delete=True),
    _missing("ts_ms"),
    _missing("txId"),
    json.dumps(value("c", T1, 24_000_200)),
    json.dumps(value("c", T1, 24_000_300, after={"email": "no-id@example.com"})),
]
PARTIAL_SNAPSHOT = _snapshot([("customers", customer(n)) for n in (1, 2, 3)], last=False)
FIRST_TX = (None, 700)  # the first transaction after a snapshot: Debezium has seen no commit yet
TXN3 = [value("c", T1, 24_000_100 + n, after=customer(n)) for n in range(3)]
_message = value("m", T1, 24_000_100)
_message["source"]["schema"] = _message["source"]["table"] = ""
_message["message"] = {"prefix": "audit", "content": "aGVsbG8="}
_before_key_only = {"id": 1, "email": None, "bio": None, "balance": None, "updated_at": None}

# A non-transactional message is decoded at its own LSN, between two commits. Debezium handles it as
# a commit of its own: its sequence is [its LSN, its LSN], and the next transaction names it as the
# last commit (its events may lie on either side of the message's LSN).
MSG_LSN = 24_001_500
_nontx_message = value("m", (MSG_LSN, None), MSG_LSN)
_nontx_message["source"]["schema"] = _nontx_message["source"]["table"] = ""
_nontx_message["message"] = {"prefix": "heartbeat", "content": "MQ=="}

# The unavailable-value placeholder in every shape Debezium gives it by column type (its
# UnchangedToastedPlaceholder): bytea as base64 of the placeholder's bytes (binary.handling.mode=bytes),
# int/bigint/date arrays as those bytes, bytea arrays as base64 texts, hstore as a map or its JSON text,
# uuid arrays as the placeholder's name-based UUID; a geometry with the placeholder as its WKB.
_PLACEHOLDER_BYTES = UNAVAILABLE.encode()
_PLACEHOLDER_B64 = base64.b64encode(_PLACEHOLDER_BYTES).decode()
PLACEHOLDER_SHAPES = {
    "body": UNAVAILABLE,
    "photo": _PLACEHOLDER_B64,
    "tags": [UNAVAILABLE],
    "thumbs": [_PLACEHOLDER_B64],
    "scores": list(_PLACEHOLDER_BYTES),
    "attrs": {UNAVAILABLE: UNAVAILABLE},
    "attrs_json": json.dumps({UNAVAILABLE: UNAVAILABLE}, separators=(",", ":")),
    "refs": ["b68a35a7-17ad-35b3-af2a-ae46edb4545a"],
    "shape": {"wkb": _PLACEHOLDER_B64, "srid": None},
}
# binary.handling.mode=hex: bytea as the lowercase hex of the placeholder's bytes (Debezium's
# HexConverter), bytea arrays as those texts; base64 and base64-url-safe give the base64 text above
# (the placeholder's base64 has no character the two alphabets differ in).
PLACEHOLDER_SHAPES_HEX = {
    "photo": _PLACEHOLDER_BYTES.hex(),
    "thumbs": [_PLACEHOLDER_BYTES.hex()],
}


def _device(did, serial, name="probe"):
    return {"id": did, "serial": serial, "name": name}


def _audit(n, note):
    return {"at": f"2026-01-0{n}T00:00:00Z", "note": note}


# scenario -> [(file, [record (dict or raw line), ...]), ...]
SCENARIOS: dict[str, list[tuple[str, list]]] = {
    "bare_value": [(FILE, [_bare_value(), closer()])],
    "nested": [
        (FILE, [value("c", T1, 24_000_100, after={"id": 1, "geo": {"srid": 4326, "wkb": "AQ=="}}), closer()])
    ],
    "composite_key_bare": [(FILE, [_composite_key_line(False), closer()])],
    "composite_key_wrapped": [(FILE, [_composite_key_line(True), closer()])],
    "typed": [
        (
            FILE,
            [
                keyed(
                    {
                        "schema": {"type": "struct", "fields": [field("id", "int64", optional=False)]},
                        "payload": {"id": 1},
                    },
                    typed_value(TYPED_ROW),
                ),
                typed_value({**TYPED_ROW, "id": 2}),  # the value alone, keyed by the registry
                closer(),
            ],
        )
    ],
    "wrapped_value_registry": [
        (
            FILE,
            [
                with_schema(value("c", T1, 24_000_100, after=customer(5)), "shop.public.customers.Envelope"),
                closer(),
            ],
        )
    ],
    "kafka_key_wins": [
        (FILE, [keyed({"email": "a@example.com"}, value("c", T1, 24_000_100, after=customer(1))), closer()])
    ],
    "unknown_key": [(FILE, [UNKNOWN_KEY_LINE, value("c", T1, 24_000_200, after=customer(2)), closer()])],
    "toast": [
        (
            FILE,
            [
                value("u", T1, 24_000_100, after=customer(1, email="new@example.com", bio=UNAVAILABLE)),
                value(
                    "u",
                    T1,
                    24_000_200,
                    before=customer(2, email="old@example.com", bio=UNAVAILABLE),
                    after=customer(2, email="new@example.com", bio=UNAVAILABLE),
                ),
                closer(),
            ],
        )
    ],
    "key_change": [
        (
            FILE,
            [
                keyed({"id": 3}, value("c", T1, 24_000_100, after=customer(3))),
                keyed({"id": 1}, value("d", T1, 24_000_100, before=_before_key_only)),
                keyed(
                    {"id": 4},
                    value(
                        "u",
                        T1,
                        24_000_200,
                        before=customer(2, balance="1.00"),
                        after=customer(4, balance="1.00"),
                    ),
                ),
                closer(),
            ],
        )
    ],
    "delete_no_before": [(FILE, [keyed({"id": 8}, value("d", T1, 24_000_100, before=None)), closer()])],
    "truncate": [
        (
            FILE,
            [
                keyed(None, value("t", T1, 24_000_100, table="order_items")),
                keyed(
                    {"order_id": 1, "line_no": 1},
                    value("c", T1, 24_000_200, table="order_items", after={"order_id": 1, "line_no": 1}),
                ),
                closer(),
            ],
        )
    ],
    # T2 began before T1 (lower event LSNs) but committed after it: sequence[0] orders it later.
    "commit_order": [
        (
            FILE,
            [
                value("c", T2, 23_999_500, after=customer(21)),
                value("c", T1, 24_000_100, after=customer(11)),
                value("u", T2, 23_999_600, after=customer(21, email="x@example.com")),
                value("c", T1, 24_000_050, after=customer(10)),
                closer(),
            ],
        )
    ],
    "total_order": [
        (
            FILE,
            [
                value("c", T1, 24_000_300, after=customer(1), total_order=2),
                value("c", T1, 24_000_100, after=customer(2), total_order=1),
                closer(),
            ],
        )
    ],
    # The same transaction again in a copied file, after a replay of its last event.
    "duplicates": [(FILE, TXN3), ("0000000001700000_copy.jsonl", [TXN3[2], *TXN3, closer()])],
    "trailing": [
        (
            FILE,
            [
                value("c", T1, 24_000_100, after=customer(1)),
                value("c", T2, 24_001_100, after=customer(2)),
                "{not json",  # after the pending start: pending too, so never rejected twice
                value("u", T2, 24_001_200, after=customer(2, email="b@example.com")),
            ],
        )
    ],
    "trailing_two_files": [
        (
            "A.jsonl",
            [value("c", T1, 24_000_100, after=customer(1)), value("c", T2, 24_001_100, after=customer(2))],
        ),
        ("B.jsonl", ["garbage", value("c", T2, 24_001_200, after=customer(3))]),
    ],
    "snapshot": [
        (FILE, _snapshot([("customers", customer(2)), ("customers", customer(1)), ("accounts", {"id": 5})]))
    ],
    "snapshot_in_progress": [(FILE, PARTIAL_SNAPSHOT)],
    # Streaming after the snapshot: the first transaction has sequence[0] null.
    "snapshot_then_streaming": [
        (
            FILE,
            [
                *PARTIAL_SNAPSHOT,
                value("u", FIRST_TX, 23_950_100, after=customer(1, email="s@example.com")),
                value("c", FIRST_TX, 23_950_200, after=customer(4)),
                value("c", (23_950_300, 701), 23_951_000, after=customer(5)),
            ],
        )
    ],
    # A streamed transaction whose previous commit is the snapshot's own LSN shares its position.
    "snapshot_tie": [
        (
            FILE,
            [
                *_snapshot([("customers", customer(1)), ("customers", customer(2))]),
                value("u", (23_900_000, 700), 23_950_100, after=customer(1, email="t@example.com")),
                closer(),
            ],
        )
    ],
    "tx_metadata": [
        (
            FILE,
            [
                {
                    "status": "BEGIN",
                    "id": "701:24000000",
                    "ts_ms": TS_MS,
                    "event_count": None,
                    "data_collections": None,
                },
                value("c", T1, 24_000_100, after=customer(1), total_order=1),
                {
                    "status": "END",
                    "id": "701:24000000",
                    "ts_ms": TS_MS,
                    "event_count": 1,
                    "data_collections": [],
                },
                keyed({"id": 1}, None),  # a tombstone
            ],
        )
    ],
    "rejects": [(FILE, [*REJECTED, closer()])],
    "message": [(FILE, [_message, closer()])],
    "nontx_message": [
        (
            FILE,
            [
                value("c", T1, 24_000_100, after=customer(1)),
                _nontx_message,
                value("c", (MSG_LSN, 702), 24_001_400, after=customer(2)),
                value("u", (MSG_LSN, 702), 24_001_600, after=customer(2, email="m@example.com")),
                closer(),
            ],
        )
    ],
    "toast_shapes": [
        (
            FILE,
            [
                keyed(
                    {"id": 1},
                    value(
                        "u",
                        T1,
                        24_000_100,
                        table="documents",
                        after={"id": 1, "title": "t", "nums": [1, 2], **PLACEHOLDER_SHAPES},
                    ),
                ),
                closer(),
            ],
        )
    ],
    "toast_shapes_hex": [
        (
            FILE,
            [
                keyed(
                    {"id": 1},
                    value(
                        "u",
                        T1,
                        24_000_100,
                        table="documents",
                        after={"id": 1, "title": "t", "photo_small": "00ff", **PLACEHOLDER_SHAPES_HEX},
                    ),
                ),
                closer(),
            ],
        )
    ],
    # REPLICA IDENTITY USING INDEX on the unique serial: an update that changes the serial, and a
    # delete, carry the index's columns in before and no key (in before or in the Kafka key).
    "using_index": [
        (
            FILE,
            [
                keyed({"id": 1}, value("c", T1, 24_000_100, table="devices", after=_device(1, "S1"))),
                keyed(
                    {"id": 1},
                    value(
                        "u",
                        (24_000_300, 702),
                        24_000_400,
                        table="devices",
                        before=_device(None, "S1", None),
                        after=_device(1, "S2"),
                    ),
                ),
                keyed(
                    {"id": None},
                    value(
                        "d",
                        (24_000_500, 703),
                        24_000_600,
                        table="devices",
                        before=_device(None, "S2", None),
                    ),
                ),
                keyed({"id": 999}, closer()),
            ],
        )
    ],
    # No primary key: the Kafka key is null. Two rows of one multi-row insert share an LSN.
    "keyless": [
        (
            FILE,
            [
                keyed(None, value("c", T1, 24_000_100, table="audit_log", after=_audit(2, "b"))),
                keyed(None, value("c", T1, 24_000_100, table="audit_log", after=_audit(1, "a"))),
                keyed(
                    None,
                    value(
                        "u", T1, 24_000_200, table="audit_log", before=_audit(1, "a"), after=_audit(1, "c")
                    ),
                ),
                keyed(None, value("d", T1, 24_000_300, table="audit_log", before=_audit(2, "b"))),
                keyed(None, value("c", T1, 24_000_400, after=customer(7))),  # the registry keys it
                closer(),
            ],
        )
    ],
    "registry_per_source": [
        (FILE, [value("c", T1, 24_000_100, table="accounts", after={"id": 5, "number": "A-5"}), closer()])
    ],
}


def _lines(spark, scenarios):
    rows = [
        (name, file, n, r if isinstance(r, str) else json.dumps(r, separators=(",", ":")))
        for name, files in scenarios.items()
        for file, records in files
        for n, r in enumerate(records, start=1)
    ]
    return spark.createDataFrame(rows, LINES_SCHEMA)


def _run(spark, lines, registry) -> dict[str, dict[str, list]]:
    """Transform once; per source: events (position order), rejects, pending and control lines."""
    cs = debezium.transform(lines, registry)
    cs.shared.cache()  # parse once for the five actions below
    # The output contract, nullability aside (a literal column is never null).
    assert cs.events.schema.simpleString() == EVENTS_SCHEMA.simpleString()
    assert cs.rejects.schema.simpleString() == REJECTS_SCHEMA.simpleString()
    assert (
        cs.pending.schema.simpleString() == cs.control.schema.simpleString() == PENDING_SCHEMA.simpleString()
    )
    out: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in cs.events.orderBy("commit_lsn", "commit_idx", "landing_file", "landing_line").collect():
        out[r.source_id]["events"].append(r.asDict(recursive=True))
    for r in cs.rejects.orderBy("landing_file", "landing_line").collect():
        out[r.source_id]["rejects"].append(r.asDict())
    for part in ("pending", "control"):
        for r in getattr(cs, part).orderBy("landing_file", "landing_line").collect():
            out[r.source_id][part].append((r.landing_file, r.landing_line))
    # Every line ends in exactly one place.
    for r in lines.groupBy("source_id").count().collect():
        parts = ("events", "rejects", "pending", "control")
        assert sum(len(out[r.source_id][part]) for part in parts) == r["count"], r.source_id
    cs.shared.unpersist()
    return out


SAMPLE_SOURCE = "shop_debezium"


@pytest.fixture(scope="module")
def sample_zone(tmp_path_factory):
    out = tmp_path_factory.mktemp("debezium_zone")
    sample.main(["--out", str(out), "--seed", "2", "--transactions", "40", "--format", "debezium"])
    return out


@pytest.fixture(scope="module")
def landed_without_registry(spark, sample_zone):
    """A generated Debezium landing zone (keys from the Kafka key) and one hand-written source."""
    rows = []
    for path in sorted((sample_zone / SAMPLE_SOURCE).glob("*.jsonl")):
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            rows.append((SAMPLE_SOURCE, path.name, n, line))
    no_registry = [
        UNKNOWN_KEY_LINE,
        keyed({"id": 2}, value("c", T1, 24_000_200, after=customer(2))),
        closer(),
    ]
    lines = spark.createDataFrame(rows, LINES_SCHEMA).unionByName(
        _lines(spark, {"no_registry": [(FILE, no_registry)]})
    )
    return _run(spark, lines, None)


@pytest.fixture(scope="module")
def landed(spark):
    registry = spark.createDataFrame(
        [
            ("*", "public", "customers", ["id"]),
            ("*", "public", "accounts", ["id"]),
            ("*", "public", "typed", ["id"]),
            ("registry_per_source", "public", "accounts", ["number"]),
        ],
        table_keys.SCHEMA,
    )
    return _run(spark, _lines(spark, SCENARIOS), registry)


def test_bare_value_keyed_by_the_registry(landed):
    out = landed["bare_value"]
    event = out["events"][0]
    assert out["rejects"] == [] and out["pending"] == [(FILE, 2)]
    assert event["source_id"] == "bare_value"
    assert event["source_format"] == "debezium"
    assert event["action"] == "insert"
    assert (event["commit_lsn"], event["commit_idx"]) == (T1[0], 0)
    assert event["change_lsn"] == 24_000_100
    assert event["xid"] == 701
    assert event["committed_at"] == datetime.fromtimestamp(TS_MS / 1000, UTC).replace(tzinfo=None)
    assert (event["source_schema"], event["source_table"]) == ("public", "customers")
    assert event["key_columns"] == ["id"]
    assert event["record_pk"] == '["1"]'
    assert event["record"] == {
        "id": "1",
        "email": "a@example.com",
        "bio": '{"nested": [1, 2.50]}',  # a string keeps its content
        "balance": None,  # SQL NULL: present, null
        "updated_at": "2026-01-01T00:00:00Z",
        "score": "10.50",
    }
    assert event["changes"] is None and event["old_record_pk"] is None
    assert (event["landing_file"], event["landing_line"]) == (FILE, 1)


def test_nested_json_value_lands_as_json_text(landed):
    (event,) = landed["nested"]["events"]
    assert json.loads(event["record"]["geo"]) == {"srid": 4326, "wkb": "AQ=="}


@pytest.mark.parametrize("scenario", ["composite_key_bare", "composite_key_wrapped"])
def test_kafka_key_beside_the_value_gives_the_key_columns_in_key_order(landed, scenario):
    out = landed[scenario]
    (event,) = out["events"]
    assert out["rejects"] == []
    assert event["key_columns"] == ["order_id", "line_no"]
    assert event["record_pk"] == '["7","2"]'
    assert event["record"] == {"order_id": "7", "line_no": "2", "sku": "SKU-1"}


def test_schema_wrapped_value_without_key_uses_the_registry(landed):
    assert [e["record_pk"] for e in landed["wrapped_value_registry"]["events"]] == ['["5"]']


def test_schema_wrapped_values_land_each_columns_connect_type(landed):
    """The Connect schema of a wrapped value lands as the change's column_types, one text per column:
    the semantic name when there is one, a Decimal with precision and scale, an array with its items'
    type, the Postgres type the connector propagated in parentheses; a line without it sends none."""
    typed = [e for e in landed["typed"]["events"] if e["source_table"] == "typed"]
    expected = {
        "id": "int64",
        "qty": "int32",
        "small": "int16",
        "price": "org.apache.kafka.connect.data.Decimal(12,2)",
        "total": "string (NUMERIC(14,3))",
        "at": "io.debezium.time.ZonedTimestamp",
        "local_at": "io.debezium.time.MicroTimestamp",
        "day": "io.debezium.time.Date",
        "tags": "array<string>",
        "doc": "io.debezium.data.Json",
        "blob": "bytes",
    }
    assert [e["column_types"] for e in typed] == [expected, expected]
    assert typed[0]["record"]["price"] == "BNI=" and typed[0]["record"]["tags"] == '["a",null]'
    # A bare value, and a wrapped one whose schema gives no row's fields: no types.
    untyped = landed["bare_value"]["events"] + landed["wrapped_value_registry"]["events"]
    assert untyped and all(e["column_types"] is None for e in untyped)


def test_kafka_key_wins_over_the_registry(landed):
    assert landed["kafka_key_wins"]["events"][0]["key_columns"] == ["email"]


def test_unknown_key_columns_are_rejected_never_guessed(landed):
    out = landed["unknown_key"]
    assert [e["source_table"] for e in out["events"]] == ["customers"]
    (reject,) = out["rejects"]
    assert reject["reason"].startswith("no key columns for public.orders: ")
    assert (reject["raw_line"], reject["landing_line"]) == (UNKNOWN_KEY_LINE, 1)
    # It keeps its slot in the transaction: the other change is the second of it.
    assert out["events"][0]["commit_idx"] == 1


def test_without_a_registry_only_the_kafka_key_keys(landed_without_registry):
    out = landed_without_registry["no_registry"]
    assert out["rejects"][0]["reason"].startswith("no key columns for public.orders: ")
    assert [e["record_pk"] for e in out["events"]] == ['["2"]']
    assert out["pending"] == [(FILE, 3)]  # the closer has no key, but it is pending first


def test_unavailable_value_is_absent_and_changes_come_from_a_full_before(landed):
    first, second = landed["toast"]["events"]
    assert first["action"] == "update"
    assert "bio" not in first["record"] and first["record"]["email"] == "new@example.com"
    assert first["changes"] is None  # REPLICA IDENTITY DEFAULT: no before, no old values
    assert "bio" not in second["record"]
    assert second["changes"] == {"email": "old@example.com"}
    assert second["old_record_pk"] is None


def test_key_change_as_delete_plus_create_and_as_update(landed):
    delete, create, update = landed["key_change"]["events"]
    assert [(e["action"], e["commit_idx"], e["record_pk"]) for e in (delete, create, update)] == [
        ("delete", 0, '["1"]'),
        ("insert", 1, '["3"]'),  # after the delete at the same LSN, although its line came first
        ("update", 2, '["4"]'),
    ]
    assert delete["record"]["id"] == "1"
    # The create of the new key is a move from the old one: it names the key it moved from.
    assert create["old_record_pk"] == '["1"]' and delete["old_record_pk"] is None
    assert update["old_record_pk"] == '["2"]'
    assert update["changes"] == {"id": "2"}


def test_delete_without_before_is_keyed_from_the_kafka_key(landed):
    (event,) = landed["delete_no_before"]["events"]
    assert (event["record"], event["record_pk"], event["key_columns"]) == ({"id": "8"}, '["8"]', ["id"])


def test_truncate(landed):
    t, i = landed["truncate"]["events"]
    assert (t["action"], t["commit_idx"], i["commit_idx"]) == ("truncate", 0, 1)
    assert (t["source_schema"], t["source_table"]) == ("public", "order_items")
    assert t["key_columns"] is None and t["record_pk"] is None and t["record"] is None


def test_positions_order_transactions_as_committed_and_rank_within(landed):
    got = [
        (e["commit_lsn"], e["commit_idx"], e["record_pk"], e["action"])
        for e in landed["commit_order"]["events"]
    ]
    assert got == [
        (T1[0], 0, '["10"]', "insert"),
        (T1[0], 1, '["11"]', "insert"),
        (T2[0], 0, '["21"]', "insert"),
        (T2[0], 1, '["21"]', "update"),
    ]


def test_total_order_from_transaction_metadata(landed):
    got = [(e["record_pk"], e["commit_idx"]) for e in landed["total_order"]["events"]]
    assert got == [('["2"]', 0), ('["1"]', 1)]


def test_duplicates_get_the_same_positions(landed):
    events = landed["duplicates"]["events"]
    positions: dict[tuple, set] = {}
    for e in events:
        positions.setdefault((e["commit_lsn"], e["commit_idx"]), set()).add(e["record_pk"])
    assert positions == {(T1[0], 0): {'["0"]'}, (T1[0], 1): {'["1"]'}, (T1[0], 2): {'["2"]'}}
    assert len(events) == 7


def test_trailing_transaction_is_pending_with_everything_after_it(landed):
    out = landed["trailing"]
    assert [e["record_pk"] for e in out["events"]] == ['["1"]']
    assert out["pending"] == [(FILE, 2), (FILE, 3), (FILE, 4)]
    assert out["rejects"] == []


def test_pending_is_a_suffix_across_files(landed):
    out = landed["trailing_two_files"]
    assert out["pending"] == [("A.jsonl", 2), ("B.jsonl", 1), ("B.jsonl", 2)]
    assert [e["record_pk"] for e in out["events"]] == ['["1"]']


def test_snapshot_is_one_transaction_at_its_lsn_ranked_by_table_and_key(landed):
    out = landed["snapshot"]
    assert out["pending"] == []  # its "last" read completes it
    got = [
        (e["action"], e["commit_lsn"], e["commit_idx"], e["source_table"], e["record_pk"])
        for e in out["events"]
    ]
    assert got == [
        ("read", 23_900_000, 0, "accounts", '["5"]'),
        ("read", 23_900_000, 1, "customers", '["1"]'),
        ("read", 23_900_000, 2, "customers", '["2"]'),
    ]
    assert all(e["xid"] == 690 and e["change_lsn"] == 23_900_000 for e in out["events"])


def test_snapshot_in_progress_is_pending_until_last_or_streaming(landed):
    out = landed["snapshot_in_progress"]
    assert out["events"] == [] and out["pending"] == [(FILE, n) for n in (1, 2, 3)]

    # The first streamed transaction (sequence[0] null) is positioned by its greatest event LSN:
    # above the snapshot, below the commit the next transaction names.
    out = landed["snapshot_then_streaming"]
    got = [(e["commit_lsn"], e["commit_idx"], e["action"]) for e in out["events"]]
    assert got == [
        (23_900_000, 0, "read"),
        (23_900_000, 1, "read"),
        (23_900_000, 2, "read"),
        (23_950_200, 0, "update"),
        (23_950_200, 1, "insert"),
    ]
    assert out["pending"] == [(FILE, 6)]


def test_a_stream_transaction_at_the_snapshot_lsn_ranks_after_the_reads(landed):
    got = [(e["commit_lsn"], e["commit_idx"], e["action"]) for e in landed["snapshot_tie"]["events"]]
    assert got == [(23_900_000, 0, "read"), (23_900_000, 1, "read"), (23_900_000, 2, "update")]


def test_transaction_metadata_end_completes_and_markers_are_control(landed):
    out = landed["tx_metadata"]
    assert [e["record_pk"] for e in out["events"]] == ['["1"]']
    assert out["control"] == [(FILE, 1), (FILE, 3), (FILE, 4)]
    assert out["pending"] == [] and out["rejects"] == []


def test_rejects(landed):
    out = landed["rejects"]
    assert [r["reason"] for r in out["rejects"]] == [
        "malformed JSON",
        "empty line",
        "unknown op 'x'",
        debezium_envelope.REASON_NOT_EVENT,
        debezium_envelope.REASON_NO_LSN,
        debezium_envelope.REASON_NO_TS,
        debezium_envelope.REASON_NO_TXID,
        debezium_envelope.REASON_NO_ROW,
        debezium_envelope.REASON_KEY_MISSING,
    ]
    assert [r["raw_line"] for r in out["rejects"]] == REJECTED
    assert out["events"] == [] and out["pending"] == [(FILE, len(REJECTED) + 1)]


def test_logical_message(landed):
    (event,) = landed["message"]["events"]
    assert event["action"] == "message"
    assert event["record"] == {"prefix": "audit", "content": "aGVsbG8=", "transactional": "true"}
    assert event["source_table"] is None and event["record_pk"] is None and event["key_columns"] is None


def test_a_non_transactional_message_has_a_position_no_change_can_take(landed):
    got = [(e["commit_lsn"], e["commit_idx"], e["action"]) for e in landed["nontx_message"]["events"]]
    # Decoded between the two transactions: before every change of the one that names it as the last
    # commit, whatever their event LSNs, and at an index no change takes.
    assert got == [
        (T1[0], 0, "insert"),
        (MSG_LSN, -1, "message"),
        (MSG_LSN, 0, "insert"),
        (MSG_LSN, 1, "update"),
    ]
    message = landed["nontx_message"]["events"][1]
    assert message["record"]["transactional"] == "false" and message["xid"] is None


def test_the_unavailable_placeholder_in_any_shape_is_a_column_not_sent(landed):
    (event,) = landed["toast_shapes"]["events"]
    assert event["record"] == {"id": "1", "title": "t", "nums": "[1,2]"}


def test_the_unavailable_placeholder_in_hex_binary_mode_is_a_column_not_sent(landed):
    # Kept as the value, the hex text would replace the row's bytes: the unchanged-TOAST rule keeps them.
    (event,) = landed["toast_shapes_hex"]["events"]
    assert event["record"] == {"id": "1", "title": "t", "photo_small": "00ff"}


def test_using_index_an_identity_without_the_key_lands_as_old_identity(landed):
    out = landed["using_index"]
    assert out["rejects"] == []
    got = [(e["action"], e["record_pk"], e["old_record_pk"], e["old_identity"]) for e in out["events"]]
    assert got == [
        ("insert", '["1"]', None, None),
        ("update", '["1"]', None, {"serial": "S1"}),  # the old key is resolved from it in sequin_events
        ("delete", None, None, {"serial": "S2"}),
    ]


def test_changes_of_a_table_without_a_key_land_with_a_null_record_pk(landed):
    out = landed["keyless"]
    assert out["rejects"] == []
    got = [(e["commit_idx"], e["action"], e["record_pk"], e["key_columns"]) for e in out["events"]]
    assert got == [
        (0, "insert", None, None),
        (1, "insert", None, None),  # same LSN, another row: its own position
        (2, "update", None, None),
        (3, "delete", None, None),
        (4, "insert", '["7"]', ["id"]),  # a null Kafka key, but the registry declares the table's key
    ]
    update, delete = out["events"][2:4]
    assert update["record"] == _audit(1, "c") and update["changes"] == {"note": "a"}
    assert update["old_record_pk"] is None and delete["record"] == _audit(2, "b")


def test_a_registry_row_for_the_source_wins_over_one_for_every_source(landed):
    (event,) = landed["registry_per_source"]["events"]
    assert (event["key_columns"], event["record_pk"]) == (["number"], '["A-5"]')
    assert landed["snapshot"]["events"][0]["key_columns"] == ["id"]  # accounts elsewhere: the * row


def test_the_sample_debezium_zone_replays_to_its_expected_state(landed_without_registry, sample_zone):
    """End to end: generated files -> transform -> last touch per key wins == expected.json."""
    manifest = json.loads((sample_zone / "manifest.json").read_text())["sources"][SAMPLE_SOURCE]
    out = landed_without_registry[SAMPLE_SOURCE]
    assert len(out["rejects"]) == manifest["expected_rejects"]
    assert len(out["pending"]) == manifest["pending_lines"]

    by_position: dict[tuple, dict] = {}
    for e in out["events"]:
        prior = by_position.setdefault((e["commit_lsn"], e["commit_idx"]), e)
        assert (prior["action"], prior["record_pk"], prior["record"]) == (
            e["action"],
            e["record_pk"],
            e["record"],
        )
    assert len(by_position) == manifest["distinct_positions"] - manifest["pending_lines"]
    state: dict[str, dict] = {}
    deleted: dict[tuple, dict] = {}
    for _, e in sorted(by_position.items()):
        table = state.setdefault(f"{e['source_schema']}.{e['source_table']}", {})
        if e["action"] == "truncate":
            table.clear()
        elif e["action"] == "delete":
            deleted[(e["source_table"], e["record_pk"])] = table.pop(e["record_pk"], {})
        else:
            previous = table.pop(e["old_record_pk"] or e["record_pk"], {})
            # A Debezium key change deletes the old key first: the move takes its last values.
            if e["old_record_pk"] and not previous:
                previous = deleted.get((e["source_table"], e["old_record_pk"]), {})
            table[e["record_pk"]] = {**previous, **e["record"]}

    expected = json.loads((sample_zone / manifest["expected_state"]).read_text())
    for name, expected_rows in expected.items():
        columns, key = sample.TABLES[name.split(".")[1]]
        kinds = dict(columns)
        want = {json.dumps([str(r[c]) for c in key], separators=(",", ":")): r for r in expected_rows}
        got = state.get(name, {})
        assert set(got) == set(want), name
        for pk, row in want.items():
            for column, expected_value in row.items():
                landed_value = got[pk].get(column)
                if expected_value is None:
                    assert landed_value is None, (name, pk, column)
                elif kinds[column] == sample.NUMERIC:
                    assert float(landed_value) == expected_value
                elif kinds[column] == sample.TIMESTAMPTZ:
                    assert landed_value.replace("Z", "+00:00") == expected_value
                else:
                    assert landed_value == str(expected_value), (name, pk, column)


# --- the job: the table registry file, and positions whatever the batching -------------------------

SNAP = 23_900_000
T1_AT_SNAPSHOT = (SNAP, 700)  # a streamed transaction naming the snapshot's LSN as its last commit
T2_ = (23_950_300, 701)
T3_ = (23_950_600, 702)
T4_ = (23_950_900, 703)
_T2 = [value("c", T2_, 23_950_400, after=customer(4)), value("u", T2_, 23_950_500, after=customer(4, "u@x"))]
_T3 = [value("c", T3_, 23_950_700, after=customer(5)), value("c", T3_, 23_950_800, after=customer(6))]
# Bare values (keyed by the registry file). The snapshot's last read, and a transaction at its LSN
# that goes on in the next file; after a connector restart, a replay from the middle of T2, which a
# batch before has landed.
BATCHING_FILES = {
    "0001.jsonl": [
        *_snapshot([("customers", customer(1)), ("customers", customer(2))], lsn=SNAP),
        value("u", T1_AT_SNAPSHOT, 23_950_100, after=customer(1, "t1@x")),
    ],
    "0002.jsonl": [value("c", T1_AT_SNAPSHOT, 23_950_200, after=customer(3)), *_T2, _T3[0]],
    "0003.jsonl": [_T2[1], *_T3, value("c", T4_, 23_951_000, after=customer(7))],
}
BATCHING_POSITIONS = {
    ("0001.jsonl", 1): (SNAP, 0, '["1"]'),
    ("0001.jsonl", 2): (SNAP, 1, '["2"]'),
    ("0001.jsonl", 3): (SNAP, 2, '["1"]'),  # after the snapshot's reads at its LSN
    ("0002.jsonl", 1): (SNAP, 3, '["3"]'),
    ("0002.jsonl", 2): (T2_[0], 0, '["4"]'),
    ("0002.jsonl", 3): (T2_[0], 1, '["4"]'),
    ("0002.jsonl", 4): (T3_[0], 0, '["5"]'),
    ("0003.jsonl", 1): (T2_[0], 1, '["4"]'),  # the replay: the position it landed at
    ("0003.jsonl", 2): (T3_[0], 0, '["5"]'),
    ("0003.jsonl", 3): (T3_[0], 1, '["6"]'),
}  # the last transaction waits for its commit


@pytest.fixture(scope="module")
def batching_zone(tmp_path_factory):
    root = tmp_path_factory.mktemp("batching")
    (root / "landing" / "dbz").mkdir(parents=True)
    for name, records in BATCHING_FILES.items():
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        (root / "landing" / "dbz" / name).write_text(text)
    keys = root / "table_keys.csv"
    keys.write_text("source_id,source_schema,source_table,key_columns\n*,public,customers,id\n")
    return root


def test_positions_in_one_batch(spark, batching_zone):
    lines = _lines(spark, {"dbz": list(BATCHING_FILES.items())})
    registry = table_keys.to_frame(spark, table_keys.load(batching_zone / "table_keys.csv"))
    events = debezium.transform(lines, registry).events.collect()
    got = {(e.landing_file, e.landing_line): (e.commit_lsn, e.commit_idx, e.record_pk) for e in events}
    assert got == BATCHING_POSITIONS


def test_a_file_per_batch_continues_from_what_landed(spark, batching_zone):
    """The transform on its own, a file per batch (with the lines the batch before left pending), each
    given what the batches before it landed, twice (as from a copied file), and the frontier: the
    snapshot's reads land first, the transaction at their LSN waiting behind them, which the next
    batch numbers after the landed reads; the replay of T2 in the last batch takes the index it landed
    with. Landed events are handed over as rows, as the job reads them from its table: the transform
    does not recompute the earlier batches."""
    lines = _lines(spark, {"dbz": list(BATCHING_FILES.items())})
    registry = table_keys.to_frame(spark, table_keys.load(batching_zone / "table_keys.csv"))
    landed, pending, frontier, got = [], [], None, []
    for name in BATCHING_FILES:
        waiting = " or ".join(f"(landing_file = '{f}' and landing_line = {n})" for f, n in pending)
        batch = lines.where(f"landing_file = '{name}'" + (f" or {waiting}" if waiting else ""))
        landed_rows = spark.createDataFrame(landed, EVENTS_SCHEMA) if landed else None
        cs = debezium.transform(batch, registry, landed_rows, None if frontier is None else {"dbz": frontier})
        cs.shared.cache()  # one transform for both actions below
        events = cs.events.collect()
        pending = [(r.landing_file, r.landing_line) for r in cs.pending.collect()]
        cs.shared.unpersist()
        landed += events * 2
        frontier = max([frontier or 0, *(e.commit_lsn for e in events)])
        got += [((e.landing_file, e.landing_line), (e.commit_lsn, e.commit_idx, e.record_pk)) for e in events]
    assert dict(got) == BATCHING_POSITIONS and len(got) == len(BATCHING_POSITIONS)
    assert pending == [("0003.jsonl", 4)]  # T4, the last transaction


def test_positions_do_not_depend_on_the_batching(spark, batching_zone, schemas):
    """Two files per batch, through the job (keyed by the registry file it is given): the positions of
    one batch, although the snapshot's LSN is cut by files, T3 by batches, and T2 is replayed after it
    landed (the snapshot's LSN cut by batches: the test above, on the transform alone)."""
    schema = f"{schemas.raw}_per_file"
    spark.sql(f"drop schema if exists {schema} cascade")
    summary = job.run(
        spark,
        str(batching_zone / "landing"),
        schema=schema,
        out=io.StringIO(),
        max_files_per_batch=2,
        table_keys_file=str(batching_zone / "table_keys.csv"),
    )
    assert summary.batches == 2 and summary.balanced and summary.rejected == 0
    events = spark.table(f"{schema}.{EVENTS}").collect()
    spark.sql(f"drop schema if exists {schema} cascade")
    got = {
        (e.landing_file.rsplit("/", 1)[1], e.landing_line): (e.commit_lsn, e.commit_idx, e.record_pk)
        for e in events
    }
    assert got == BATCHING_POSITIONS


def test_a_batch_that_looks_up_landed_events_is_held_apart_from_wal_events(spark, batching_zone, schemas):
    """The classified lines of a batch that reads landed events are held (job._hold) as a checkpoint
    that reads no table: the batch's own append to wal_events would otherwise drop a cache of them
    (Delta invalidates the cached plans that read a table it writes) and they would be classified
    again for every output written after the events. Held, they give the same outputs before and
    after that append."""
    table = f"{schemas.raw}.held_landed"
    spark.sql(f"create schema if not exists {schemas.raw}")
    spark.sql(f"drop table if exists {table}")
    lines = _lines(spark, {"dbz": list(BATCHING_FILES.items())})
    registry = table_keys.to_frame(spark, table_keys.load(batching_zone / "table_keys.csv"))
    first = debezium.transform(lines.where("landing_file = '0001.jsonl'"), registry)
    first.events.write.format("delta").saveAsTable(table)
    frontier = {"dbz": first.events.agg({"commit_lsn": "max"}).first()[0]}
    second = debezium.transform(
        lines.where("landing_file = '0002.jsonl'"), registry, spark.table(table), frontier
    )
    assert second.rebuild is not None and table in second.shared._jdf.queryExecution().analyzed().toString()

    held: list = []
    try:
        kept = job._hold(second, held)
        assert table not in kept.shared._jdf.queryExecution().analyzed().toString()

        def outputs(cs):
            return {
                name: sorted(map(str, getattr(cs, name).collect()))
                for name in ("events", "rejects", "outcomes")
            }

        before = outputs(kept)
        assert before["events"] == outputs(second)["events"]
        kept.events.write.format("delta").mode("append").saveAsTable(table)
        assert outputs(kept) == before
        # The lookup at work: T1 continues after the snapshot's two landed reads.
        positions = {(e.landing_line, e.commit_lsn, e.commit_idx) for e in kept.events.collect()}
        assert positions == {(1, SNAP, 2), (2, T2_[0], 0), (3, T2_[0], 1)}
    finally:
        for df in held:
            job._release(df)
        spark.sql(f"drop table if exists {table}")


def test_table_keys_file_entries_and_problems(tmp_path):
    good = tmp_path / "keys.csv"
    good.write_text(
        'source_id,source_schema,source_table,key_columns\n*,public,order_items," order_id, line_no"\n'
    )
    assert table_keys.load(good) == (
        table_keys.TableKey("*", "public", "order_items", ("order_id", "line_no")),
    )
    assert table_keys.load(None) == ()  # the project's seed: a header, no rows
    problems = {
        "missing.csv": None,
        "header.csv": "source,schema,table,keys\n",
        "empty.csv": "source_id,source_schema,source_table,key_columns\n*,public,t,\n",
        "none.csv": "source_id,source_schema,source_table,key_columns\n*,public,t,None\n",
        "short.csv": "source_id,source_schema,source_table,key_columns\n*,public,t\n",
    }
    messages = {}
    for name, text in problems.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(table_keys.TableKeysError) as info:
            table_keys.load(tmp_path / name)
        messages[name] = str(info.value)
        assert f"table keys file {tmp_path / name}: " in messages[name] and "\n" not in messages[name]
    assert messages["missing.csv"].endswith(": not found")
    assert "header must be source_id,source_schema,source_table,key_columns" in messages["header.csv"]
    assert messages["empty.csv"].endswith("line 2: key_columns is empty for public.t")
    assert messages["none.csv"].endswith("line 2: key_columns is empty for public.t")


def test_a_missing_project_seed_of_table_keys_is_an_error_naming_it(tmp_path, capsys, monkeypatch):
    """The registry's default file is the project's seed: when it is gone, the run says so before
    reading anything, instead of running with no registry (every bare value rejected as unkeyable)."""
    gone = tmp_path / "seeds" / "table_keys.csv"
    monkeypatch.delenv("WAL_LAKE_TABLE_KEYS", raising=False)
    monkeypatch.setattr(table_keys, "DEFAULT_PATH", gone)
    with pytest.raises(
        table_keys.TableKeysError, match=f"table keys file {gone}: not found .*project's seed"
    ):
        table_keys.load(None)
    assert cli.main(["--landing", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ingest: error: table keys file {gone}: not found") and "\n" not in err


def test_cli_table_keys_option_and_environment(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "nope.csv"
    assert cli.main(["--landing", str(tmp_path), "--table-keys", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"ingest: error: table keys file {missing}: not found"
    monkeypatch.setenv("WAL_LAKE_TABLE_KEYS", str(missing))
    assert cli.main(["--landing", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == err
    with pytest.raises(table_keys.TableKeysError):
        job.run(None, str(tmp_path))  # the job as a library reads the environment too, before Spark


# The first transaction after a snapshot names no previous commit; it began before the snapshot's
# point, so its events sit below the snapshot's LSN although it commits after it.
EARLY_TX = [
    keyed({"id": 1}, value("u", FIRST_TX, SNAP - 200, after=customer(1, "early@x"), total_order=1)),
    keyed({"id": 3}, value("c", FIRST_TX, SNAP - 100, after=customer(3), total_order=2)),
]
EARLY_NEXT = keyed({"id": 4}, value("c", (SNAP + 5_000, 701), SNAP + 5_100, after=customer(4), total_order=1))


def test_the_stand_in_for_a_missing_previous_commit_sorts_after_the_snapshot(spark):
    """In one batch with the snapshot, and in a batch after the snapshot landed: the transaction lands
    just above the snapshot's LSN, its indexes its own, below the transaction that follows."""
    snapshot = _snapshot([("customers", customer(n)) for n in (1, 2)])
    reads = [keyed({"id": n}, r) for n, r in zip((1, 2), snapshot, strict=True)]
    lines = _lines(spark, {"dbz": [("0001.jsonl", reads), ("0002.jsonl", [*EARLY_TX, EARLY_NEXT])]})
    events = debezium.transform(lines).events
    rows = events.orderBy("commit_lsn", "commit_idx").collect()
    got = [(e.commit_lsn, e.commit_idx, e.action) for e in rows]
    expected = [(SNAP, 0, "read"), (SNAP, 1, "read"), (SNAP + 1, 0, "update"), (SNAP + 1, 1, "insert")]
    assert got == expected
    # the landed reads as rows, as the job reads them from its table
    landed = spark.createDataFrame([e for e in rows if e.action == "read"], events.schema)
    later = debezium.transform(lines.where("landing_file = '0002.jsonl'"), None, landed, {"dbz": SNAP})
    got = [(e.commit_lsn, e.commit_idx, e.action) for e in later.events.orderBy("commit_idx").collect()]
    assert got == expected[2:]


def test_a_landing_zone_of_one_topic_per_table_stops_the_run_naming_the_files(spark, tmp_path, schemas):
    """Debezium's default routing writes each table to its own topic; a sink then names its files by
    topic, so the names sort by table, not in WAL order. Two one-table files whose positions go back
    across their names stop the run, naming both, before anything is written; the same changes as
    one topic's files in offset order land."""

    def order(oid):
        return {"id": oid, "total": "5.00"}

    customers = [
        keyed({"id": 1}, value("c", T1, 24_000_100, after=customer(1))),
        keyed({"id": 2}, value("c", (24_000_600, 703), 24_000_700, after=customer(2))),
    ]
    orders = [
        keyed({"id": 1}, value("c", (24_000_300, 702), 24_000_400, table="orders", after=order(1))),
        # a later transaction: it proves every one before it complete (and is itself pending)
        keyed({"id": 2}, value("c", (24_008_500, 799), 24_009_000, table="orders", after=order(2))),
    ]

    def zone(name, files):
        root = tmp_path / name
        (root / "dbz").mkdir(parents=True)
        for file, records in files.items():
            text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
            (root / "dbz" / file).write_text(text)
        return root

    def land(root):
        schema = f"{schemas.raw}_{root.name}"
        spark.sql(f"drop schema if exists {schema} cascade")
        try:
            job.run(spark, str(root), schema=schema, out=io.StringIO())
            return spark.table(f"{schema}.{EVENTS}").count()
        finally:
            spark.sql(f"drop schema if exists {schema} cascade")

    by_customers = "oracle.public.customers+0+0000000000.jsonl"
    by_orders = "oracle.public.orders+0+0000000000.jsonl"
    per_table = zone("per_table", {by_customers: customers, by_orders: orders})
    with pytest.raises(job.IngestError, match=r"do not sort in WAL order") as raised:
        land(per_table)
    message = str(raised.value)
    assert f"{by_orders} (changes of public.orders from position 24000300)" in message
    assert f"{by_customers} (changes of public.customers to position 24000600)" in message
    one_topic = zone(
        "one_topic",
        {
            "oracle+0+0000000000.jsonl": [customers[0], orders[0]],
            "oracle+0+0000000002.jsonl": [customers[1], orders[1]],
        },
    )
    assert land(one_topic) == 3  # the last transaction waits for its commit
