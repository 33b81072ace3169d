"""json as text or as VARIANT in a Delta table: size on disk and a field query's time (best of 3).

    python -m benchmarks.variant [--rows 1000000]

Writes one table of a small nested document per row (a customer struct, an array of items, a total,
a note) as ``string``, copies it with ``parse_json`` as ``variant``, and runs the same query on each:
a field grouped, a decimal summed (BENCHMARKS.md, "Other measurements"). Uses a scratch warehouse.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

QUERIES = {
    "string, get_json_object": (
        "select get_json_object(doc, '$.customer.tier') as tier,"
        " sum(cast(get_json_object(doc, '$.total') as decimal(10,2))) from j_text group by 1"
    ),
    "string, from_json (schema given)": (
        "select j.customer.tier, sum(j.total) from (select from_json(doc,"
        " 'customer struct<id int, tier string>, total decimal(10,2)') as j from j_text) group by 1"
    ),
    "variant, variant_get": (
        "select variant_get(doc, '$.customer.tier', 'string') as tier,"
        " sum(variant_get(doc, '$.total', 'decimal(10,2)')) from j_variant group by 1"
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.variant", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    os.environ.setdefault("WAL_LAKE_SPARK_DIR", tempfile.mkdtemp(prefix="wal_lake_variant_"))
    from python_jobs.spark_session import get_spark

    spark = get_spark("wal_lake_variant")
    spark.sql(
        "create or replace table j_text using delta as select id, to_json(named_struct("
        "'customer', named_struct('id', id % 1000, 'tier', concat('t', id % 5)),"
        " 'items', array(named_struct('sku', concat('s', id % 97), 'qty', id % 7)),"
        f" 'total', (id % 10000) / 100.0, 'note', repeat('x', 40))) as doc from range({args.rows})"
    )
    spark.sql(
        "create or replace table j_variant using delta as select id, parse_json(doc) as doc from j_text"
    )
    tables = ("j_text", "j_variant")
    sizes = {t: spark.sql(f"describe detail {t}").first().sizeInBytes / 1e6 for t in tables}
    print(f"{args.rows:,} rows: string {sizes['j_text']:.1f} MB, variant {sizes['j_variant']:.1f} MB")
    for name, query in QUERIES.items():
        times = []
        for _ in range(3):
            started = time.monotonic()
            spark.sql(query).collect()
            times.append(time.monotonic() - started)
        print(f"  {name:<34} best {min(times):.2f} s ({', '.join(f'{t:.2f}' for t in times)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
