"""The mark a stamped model puts on its Delta commit does not outlive the model.

source_records, consumer_records, the mirrors and mirror_rejects stamp the session
(``stamp_consumed_seq``) while they render, and their post-hook clears it. A model that fails runs
no post-hook: the models after it, in that dbt invocation or in a later one on the same Spark
session (the embedded session of a test or of the demo), must not commit under its mark.
"""

from __future__ import annotations

from model_helpers import change, land, reset_raw_tables


def test_a_failed_stamped_model_leaves_no_mark_on_the_commits_of_later_models(spark, dbt, schemas):
    reset_raw_tables(spark)
    land(spark, [change(100, 0, "insert", pk=(1,), record={"id": "1", "v": "a"})], batch_id=1)
    dbt("run", "-s", "+source_records", "keyless_changes")
    # Its next run fails after it stamped the session: the table has a column the model does not
    # make, and source_records fails on a schema change.
    spark.sql(f"alter table {schemas.models}.source_records add column unexpected int")
    land(spark, [change(200, 0, "update", pk=(1,), record={"id": "1", "v": "b"})], batch_id=2)
    failed = dbt("run", "-s", "+source_records", expect_success=False)
    assert not failed.success
    assert {r.node.name: str(r.status) for r in failed.result}["source_records"] == "error"

    dbt("run", "-s", "keyless_changes")
    latest = spark.sql(f"describe history {schemas.audit}.keyless_changes limit 1").collect()[0]
    assert latest["userMetadata"] is None
