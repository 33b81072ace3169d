"""The models' YAML unit tests (``unit_tests:`` in models/), on a warehouse of empty tables.

dbt types each mocked input by the relation it stands for, and a unit test of an incremental model
in incremental mode reads the model's own table (``input: this``): those relations have to exist,
but their rows do not matter. ``dbt run --empty`` creates them (every model a unit test tests, and
everything below it) in one step without data, so the unit tests need no build of their own and run
in the fast tier (``make check``). test_cluster runs them once more through a Thrift Server.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from model_helpers import reset_raw_tables, set_consumers

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"


def declared_unit_tests() -> set[str]:
    """The name of every unit test the models' YAML declares."""
    names = set()
    for path in MODELS_DIR.rglob("*.yml"):
        for unit_test in (yaml.safe_load(path.read_text()) or {}).get("unit_tests", []):
            names.add(unit_test["name"])
    return names


def test_every_unit_test_passes_on_empty_tables(spark, dbt, schemas):
    reset_raw_tables(spark)
    spark.sql(f"create database if not exists {schemas.models}")
    set_consumers(spark, [("all_tables", "*.*")])  # the consumers seed's table, without `dbt seed`
    dbt("run", "--empty", "-s", "+test_type:unit")
    result = dbt("test", "-s", "test_type:unit", expect_success=False)
    outcomes = {r.node.name: str(r.status) for r in result.result.results}
    assert set(outcomes) == declared_unit_tests()
    failed = {name: status for name, status in outcomes.items() if status != "pass"}
    assert not failed, failed
