"""The analyst-facing layer: typed mirrors, and the dbt documentation site.

Builds every model, the typed mirrors included, on a few hand-landed changes, checks the mirrors,
generates the docs in process (same Spark session), checks every model and column is described, and
renders the site in headless Chromium (installed by `scripts/setup.sh --chromium`).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import socketserver
import subprocess
import tempfile
import threading
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from model_helpers import change, land, reset_raw_tables

from python_jobs import mirrors

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)

CUSTOMER = {
    "id": "1",
    "email": "ada@example.com",
    "name": "Ada",
    "bio": "first customer",
    "updated_at": "2026-01-01 10:00:00+00",
}
CUSTOMER_TYPES = {"id": "bigint", "updated_at": "timestamp with time zone"}
ORDER_TYPES = {
    "id": "bigint",
    "customer_id": "bigint",
    "total": "numeric(12,2)",
    "placed_at": "timestamp with time zone",
}
CHANGES = [
    change(1000, 0, "insert", table="customers", pk=("1",), record=CUSTOMER, types=CUSTOMER_TYPES),
    change(
        1000,
        1,
        "insert",
        table="orders",
        pk=("7",),
        record={
            "id": "7",
            "customer_id": "1",
            "status": "new",
            "total": "10.50",
            "placed_at": "2026-01-01T10:05:00.123456Z",
        },
        types=ORDER_TYPES,
    ),
    change(
        1000,
        2,
        "insert",
        table="order_items",
        pk=("7", "1"),
        key_columns=("order_id", "line_no"),
        record={"order_id": "7", "line_no": "1", "sku": "SKU-1", "qty": "3"},
        types={"order_id": "bigint", "line_no": "integer", "qty": "integer"},
    ),
    change(
        2000, 0, "insert", table="customers", pk=("2",), record={**CUSTOMER, "id": "2"}, types=CUSTOMER_TYPES
    ),
    change(3000, 0, "delete", table="customers", pk=("2",), record={"id": "2"}, types=CUSTOMER_TYPES),
]


@pytest.fixture(scope="module")
def docs_target(spark, dbt, schemas) -> Path:
    reset_raw_tables(spark)
    dbt("seed", "--full-refresh")
    land(spark, CHANGES, batch_id=1)
    mirrors.generate(spark, schemas.raw)
    dbt("run", "--full-refresh")
    dbt("docs", "generate")
    return Path(os.environ["DBT_TARGET_PATH"])


def test_mirrors_hold_typed_values(spark, schemas, docs_target):
    customers = spark.table(f"{schemas.mirror}.src__public__customers")
    types = dict(customers.dtypes)
    assert (types["id"], types["email"], types["updated_at"]) == ("bigint", "string", "timestamp")
    rows = customers.collect()
    assert len(rows) == 1  # customer 2 was deleted
    row = rows[0]
    assert (row.id, row.email, row.name, row.bio) == (1, "ada@example.com", "Ada", "first customer")
    assert row.updated_at == datetime(2026, 1, 1, 10, 0)  # session time zone is UTC
    assert (row._wal_lake_record_pk, row._wal_lake_commit_lsn) == ('["1"]', "0/3E8")

    order = spark.table(f"{schemas.mirror}.src__public__orders").collect()[0]
    assert (order.id, order.customer_id, order.total) == (7, 1, Decimal("10.50"))
    assert order.placed_at == datetime(2026, 1, 1, 10, 5, 0, 123456)  # an ISO rendering converts too
    item = spark.table(f"{schemas.mirror}.src__public__order_items").collect()[0]
    assert (item.order_id, item.line_no, item.sku, item.qty) == (7, 1, "SKU-1", 3)


def test_every_model_and_column_is_described(docs_target):
    manifest = json.loads((docs_target / "manifest.json").read_text())
    catalog = json.loads((docs_target / "catalog.json").read_text())
    models = {
        uid: node
        for uid, node in manifest["nodes"].items()
        if node["resource_type"] == "model" and node["package_name"] == "wal_lake"
    }
    assert {"model.wal_lake.sequin_events", "model.wal_lake.src__public__customers"} <= models.keys()
    undocumented = []
    for uid, node in models.items():
        if not node["description"].strip():
            undocumented.append(uid)
        assert uid in catalog["nodes"], f"{uid} missing from catalog.json"
        described = {name.lower() for name, col in node["columns"].items() if col["description"].strip()}
        for column in catalog["nodes"][uid]["columns"]:
            if column.lower() not in described:
                undocumented.append(f"{uid}.{column}")
    assert not undocumented, f"models or columns without a description: {undocumented}"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_docs_site_renders_in_headless_chromium(docs_target):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/setup.sh --chromium installs Debian's package)")
    handler = functools.partial(_QuietHandler, directory=str(docs_target))
    with socketserver.TCPServer(("127.0.0.1", 0), handler) as server:
        port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            with tempfile.TemporaryDirectory(prefix="wal_lake_chromium_") as profile:
                result = subprocess.run(
                    [
                        CHROMIUM,
                        "--headless",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-quic",
                        "--no-first-run",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--disable-sync",
                        f"--user-data-dir={profile}",
                        "--virtual-time-budget=15000",
                        "--dump-dom",
                        f"http://127.0.0.1:{port}/index.html",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
        finally:
            server.shutdown()
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    for name in ("sequin_events", "consumer_records"):
        assert name in dom, f"{name} not in the rendered docs site"


def test_analyses_compile_and_run(spark, docs_target):
    compiled = docs_target / "compiled" / "wal_lake" / "analyses"
    names = sorted(path.name for path in compiled.glob("*.sql"))
    assert names == [
        "deletes_per_table_per_day.sql",
        "ingestion_lag.sql",
        "record_change_log.sql",
        "state_as_of_seq.sql",
    ]
    for name in names:
        spark.sql((compiled / name).read_text()).collect()
    log = spark.sql((compiled / "record_change_log.sql").read_text()).collect()
    assert [row.action for row in log] == ["insert"]
