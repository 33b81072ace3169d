"""Settings of the local target's Spark (profiles.yml) that the jobs' speed rests on, and one that keeps
the machine's temporary directory clean.

It keeps the code it generates for far more than Spark's default 100 stages
(``spark.sql.codegen.cache.maxEntries``): a follower cycle or a models' increment uses about 600
classes, and with the default each was generated, compiled and JIT-compiled again on every run
(docs/operations.md, "What matters at scale"). PySpark does not record the Python call site of each
DataFrame function (``spark.python.sql.dataFrameDebugging.enabled``)."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.codegen import classes_compiled

# More distinct stages than the default cache holds, fewer than the profile's.
STAGES = 120


def run_stage(spark, k: int) -> None:
    # An integer literal is inlined into the generated code: each k is a stage of its own.
    spark.range(3).selectExpr(f"id * {k} + 7 as v").collect()


def test_a_stage_run_again_after_120_others_is_not_compiled_again(spark):
    run_stage(spark, 1_000_000)
    before = classes_compiled(spark)
    for k in range(STAGES):
        run_stage(spark, 1_000_001 + k)
    others = classes_compiled(spark)
    assert others - before >= STAGES, "the stages did not compile a class each: the test would prove nothing"
    run_stage(spark, 1_000_000)
    assert classes_compiled(spark) == others, "the first stage compiled again: the cache holds too few"


def test_pyspark_does_not_record_a_call_site_for_every_function(spark):
    """PySpark asks the JVM 3-4 times per DataFrame function for the Python call site it records for
    error messages, unless ``spark.python.sql.dataFrameDebugging.enabled`` is off (profiles.yml): two
    thirds of the round trips that build an ingestion batch's transform."""
    from pyspark.errors import utils

    saved = utils._enable_debugging_cache
    utils._enable_debugging_cache = None  # PySpark reads the setting once per process
    try:
        assert utils.is_debugging_enabled() is False
    finally:
        utils._enable_debugging_cache = saved


def test_the_metastore_client_keeps_its_session_directory_under_the_spark_directory(spark):
    """Hive's metastore client makes a directory for its session, by default in the temporary
    directory, and Spark never closes that session, so the directory stays: one for every process
    that opens the metastore (a dbt invocation, a job, a test worker). profiles.yml puts it under the
    Spark directory, beside the warehouse and the metastore."""
    spark.sql("show databases").collect()  # the metastore's client is open, and its session
    under_spark_dir = Path(os.environ["WAL_LAKE_SPARK_DIR"]) / "hive_resources"
    ours = [p.name for p in under_spark_dir.iterdir()] if under_spark_dir.is_dir() else []
    assert ours, f"no session directory under {under_spark_dir}: the setting did not reach Hive"
    assert all(name.endswith("_resources") for name in ours), ours
