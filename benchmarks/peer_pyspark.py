"""The peer a user might write instead of wal_lake: one hand-written PySpark job over wal2json files.

Same logic, none of wal_lake's bookkeeping (no ledger, no frontier, no rejects, no exactly-once per
file, no incremental state): parse the lines, frame changes by their transaction's ``C`` record (by
``xid``), drop replayed duplicates (same commit LSN and change LSN), number ``seq`` in
``(commit_lsn, change_lsn)`` order, and flatten to the current state per record: the last touch
wins, a final delete removes the record, an update keeps the previous values of columns it left
out, and an update that changed the key (wal2json's ``identity`` holds the old key) moves the row:
the old key is gone, the new key carries the row's values, the ones the update left out included.
Writes the ordered log and the state as Delta (by path), as wal_lake's two marts do.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from benchmarks import PeerResult

_COLUMN = "array<struct<name:string,type:string,value:string>>"
LINE_SCHEMA = (
    f"action string, xid bigint, lsn string, timestamp string, schema string, `table` string, "
    f"columns {_COLUMN}, identity {_COLUMN}, pk array<struct<name:string,type:string>>"
)
# Spark's JSON reader turns 10.50 into "10.5" when it reads a number as a string: quote numbers first.
_NUMBER = r'("value":)(-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?=[,}\]])'


def _lsn(col) -> F.Column:
    parts = F.split(col, "/")
    return F.shiftleft(F.conv(parts[0], 16, 10).cast("bigint"), 32).bitwiseOR(
        F.conv(parts[1], 16, 10).cast("bigint")
    )


def _map(cols) -> F.Column:
    return F.map_from_entries(F.transform(cols, lambda c: F.struct(c["name"], c["value"])))


def _key(cols) -> F.Column:
    return F.to_json(F.transform("pk", lambda k: F.element_at(_map(cols), k["name"])))


def change_log(spark: SparkSession, files: list[str]) -> DataFrame:
    """Parsed, framed, deduplicated changes with a ``seq`` (the peer of sequin_events)."""
    quoted = F.regexp_replace("value", _NUMBER, '$1"$2"')
    parsed = spark.read.text(files).select(F.from_json(quoted, LINE_SCHEMA).alias("r")).select("r.*")
    commits = (
        parsed.where(F.col("action") == "C")
        .select("xid", _lsn(F.col("lsn")).alias("commit_lsn"), "timestamp")
        .dropDuplicates(["xid"])
    )
    changes = parsed.where(F.col("action").isin("I", "U", "D")).select(
        "xid",
        _lsn(F.col("lsn")).alias("change_lsn"),
        "action",
        "schema",
        "table",
        _key(F.when(F.col("action") == "D", F.col("identity")).otherwise(F.col("columns"))).alias(
            "record_pk"
        ),
        F.when(F.col("action") != "D", _map(F.col("columns"))).alias("record"),
        F.when(F.col("action") == "U", _key(F.col("identity"))).alias("old_pk"),
    )
    deduplicated = (
        changes.withColumn("old_record_pk", F.when(F.col("old_pk") != F.col("record_pk"), F.col("old_pk")))
        .drop("old_pk")
        .join(commits, "xid")
        .dropDuplicates(["commit_lsn", "change_lsn"])
    )
    return deduplicated.withColumn(
        "seq", F.row_number().over(Window.orderBy("commit_lsn", "change_lsn")).cast("bigint")
    )


def _lineages(log: DataFrame) -> DataFrame:
    """Each touch with ``lineage``: the seq of the insert that began the row it touched, across moves.

    The touches of one key split into lives, each begun by an insert or a move into the key (a life
    is named by the seq of that touch). A move's life continues the moved-from key's life current
    at the move (the one begun last before it); following those links back to an insert names the
    row. Moves are few: the links are resolved by pointer jumping, about log2(longest chain) rounds.
    """
    key = ["schema", "table", "record_pk"]
    begins = (F.col("action") == "I") | F.col("old_record_pk").isNotNull()
    so_far = Window.partitionBy(*key).orderBy("seq").rowsBetween(Window.unboundedPreceding, 0)
    touches = log.withColumn(
        "life",
        F.coalesce(
            F.max(F.when(begins, F.col("seq"))).over(so_far),
            F.min("seq").over(Window.partitionBy(*key)),  # a key whose first touch is not an insert
        ),
    )
    lives = touches.select(*key, "life").distinct()
    moves = touches.where(F.col("old_record_pk").isNotNull()).select(
        "schema", "table", F.col("old_record_pk").alias("from_pk"), F.col("seq").alias("child")
    )
    links = (
        moves.join(
            lives.withColumnRenamed("record_pk", "from_pk"),
            ["schema", "table", "from_pk"],
        )
        .where(F.col("life") < F.col("child"))
        .groupBy("child")
        .agg(F.max("life").alias("parent"))
        .localCheckpoint()
    )
    while True:
        up = links.select(F.col("child").alias("parent"), F.col("parent").alias("grandparent"))
        jumped = links.join(F.broadcast(up), "parent", "left")
        if jumped.where(F.col("grandparent").isNotNull()).isEmpty():
            break
        links = jumped.select("child", F.coalesce("grandparent", "parent").alias("parent")).localCheckpoint()
    return touches.join(F.broadcast(links), touches["life"] == links["child"], "left").select(
        *log.columns, F.coalesce("parent", "life").alias("lineage")
    )


def _fold(log: DataFrame, *group: str) -> DataFrame:
    """Fold each group's touches in seq order: an insert sets the record, a delete removes it, an
    update overrides the columns it sent. The record takes the key of the group's last touch."""
    touches = F.array_sort(
        F.collect_list(F.struct("seq", "action", "record")),
        lambda a, b: F.when(a["seq"] < b["seq"], -1).when(a["seq"] > b["seq"], 1).otherwise(0),
    )
    folded = F.aggregate(
        touches,
        F.lit(None).cast("map<string,string>"),
        lambda acc, t: (
            F.when(t["action"] == "I", t["record"])
            .when(t["action"] == "D", F.lit(None).cast("map<string,string>"))
            .otherwise(
                F.map_concat(
                    F.map_filter(
                        F.coalesce(acc, F.create_map().cast("map<string,string>")),
                        lambda k, v: ~F.map_contains_key(t["record"], k),
                    ),
                    t["record"],
                )
            )
        ),
    )
    return (
        log.groupBy("schema", "table", *group)
        .agg(folded.alias("record"), F.max_by("record_pk", "seq").alias("last_pk"), F.max("seq").alias("seq"))
        .where(F.col("record").isNotNull())
        .select("schema", "table", F.col("last_pk").alias("record_pk"), "record", "seq")
    )


def current_state(log: DataFrame) -> DataFrame:
    """The live record per (table, key) (the peer of consumer_records): the touches of each key
    folded in seq order; the few keys a move touched are folded per row instead, across its keys."""
    key = ["schema", "table", "record_pk"]
    moves = log.where(F.col("old_record_pk").isNotNull())
    moved_keys = F.broadcast(
        moves.select(*key).union(moves.select("schema", "table", F.col("old_record_pk"))).distinct()
    )
    still = _fold(log.join(moved_keys, key, "left_anti"), "record_pk")
    moved = _fold(_lineages(log.join(moved_keys, key, "left_semi")), "lineage")
    return still.unionByName(moved)


def run(spark: SparkSession, files: list[str], out: str) -> PeerResult:
    """Write the log and the state as Delta under ``out``; time each write."""
    import time

    t0 = time.monotonic()
    change_log(spark, files).write.format("delta").mode("overwrite").save(f"{out}/log")
    t1 = time.monotonic()
    log = spark.read.format("delta").load(f"{out}/log")
    current_state(log).write.format("delta").mode("overwrite").save(f"{out}/state")
    t2 = time.monotonic()
    state = spark.read.format("delta").load(f"{out}/state")
    return PeerResult(t1 - t0, t2 - t1, log.count(), state.count())
