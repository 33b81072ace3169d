"""The table registry: the key columns of tables whose Debezium lines carry no Kafka key.

Users declare it as the dbt seed ``seeds/table_keys.csv`` (so analysts see it too); the ingestion job
reads that file from the project unless ``--table-keys FILE`` / ``WAL_LAKE_TABLE_KEYS`` names another.
Columns: ``source_id`` (``*`` for every source), ``source_schema``, ``source_table``, ``key_columns``
(comma-separated, in key order). A row for one source wins over a ``*`` row for the same table.

A mistake here would key changes wrongly, so the file is checked whole before anything is read, and
any problem stops the job with one line naming the file and the problem.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from python_jobs.ingest.errors import IngestError

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "seeds" / "table_keys.csv"
ENV_VAR = "WAL_LAKE_TABLE_KEYS"
COLUMNS = ("source_id", "source_schema", "source_table", "key_columns")
ANY_SOURCE = "*"

SCHEMA = StructType(
    [
        StructField("source_id", StringType()),
        StructField("source_schema", StringType()),
        StructField("source_table", StringType()),
        StructField("key_columns", ArrayType(StringType())),
    ]
)


class TableKeysError(IngestError):
    """The table registry file is missing or malformed."""


@dataclass(frozen=True)
class TableKey:
    source_id: str
    source_schema: str
    source_table: str
    key_columns: tuple[str, ...]


def _entry(path: Path, number: int, row: dict[str, str | None]) -> TableKey:
    def problem(text: str) -> TableKeysError:
        return TableKeysError(f"table keys file {path}: line {number}: {text}")

    if None in row or any(row.get(c) is None for c in COLUMNS):
        raise problem(f"expected {len(COLUMNS)} values ({','.join(COLUMNS)})")
    values = {c: (row[c] or "").strip() for c in COLUMNS}
    # dbt-spark seeds an empty cell as the text 'None': neither is a name.
    for column in COLUMNS[:3]:
        if values[column] in ("", "None"):
            raise problem(f"{column} is empty")
    keys = tuple(k.strip() for k in values["key_columns"].split(","))
    if values["key_columns"] in ("", "None") or "" in keys:
        raise problem(f"key_columns is empty for {values['source_schema']}.{values['source_table']}")
    return TableKey(values["source_id"], values["source_schema"], values["source_table"], keys)


def load(path: str | Path | None = None) -> tuple[TableKey, ...]:
    """The registry's entries. ``None``: the file ``WAL_LAKE_TABLE_KEYS`` names, else the project's
    seed. The file must exist, the project's seed included: without it a bare Debezium value would be
    rejected as unkeyable for want of a declaration the user made and then lost (a seed deleted or
    left out of a deployment), so its absence is a misconfiguration, said before anything is read.
    A registry without entries is its header line alone, as the project ships it."""
    path = path if path is not None else os.environ.get(ENV_VAR) or None
    file = Path(path) if path is not None else DEFAULT_PATH
    if not file.is_file():
        hint = (
            ""
            if path is not None
            else " (the project's seed; restore it, its header line at least, or pass --table-keys)"
        )
        raise TableKeysError(f"table keys file {file}: not found{hint}")
    try:
        with file.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = tuple(h.strip() for h in reader.fieldnames or ())
            if header != COLUMNS:
                raise TableKeysError(
                    f"table keys file {file}: header must be {','.join(COLUMNS)} (found {','.join(header)})"
                )
            reader.fieldnames = list(COLUMNS)
            entries = [_entry(file, n, row) for n, row in enumerate(reader, start=2) if any(row.values())]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TableKeysError(f"table keys file {file}: {exc}") from exc
    seen: dict[tuple[str, str, str], TableKey] = {}
    for entry in entries:
        table = (entry.source_id, entry.source_schema, entry.source_table)
        if table in seen and seen[table] != entry:
            raise TableKeysError(
                f"table keys file {file}: {entry.source_schema}.{entry.source_table} is declared twice "
                f"for source {entry.source_id} with different key columns"
            )
        seen[table] = entry
    return tuple(seen.values())


def to_frame(spark: SparkSession, entries: tuple[TableKey, ...]) -> DataFrame:
    """The registry as a DataFrame of ``SCHEMA`` (what the Debezium transform joins)."""
    rows = [(e.source_id, e.source_schema, e.source_table, list(e.key_columns)) for e in entries]
    return spark.createDataFrame(rows, SCHEMA)
