"""Shared fixtures: one Spark session per test session, in a throwaway warehouse.

Every test that needs Spark (ingestion, dbt through the session method) uses the one session made
here; dbt-spark's session method picks it up with getOrCreate, so dbt runs in-process without a
second JVM or a second lock on the Derby metastore.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple

import pytest

PROJECT_DIR = Path(__file__).resolve().parents[2]
_SCRATCH = Path(tempfile.mkdtemp(prefix="wal_lake_tests_"))

# Isolate the warehouse, metastore and dbt's own output before anything starts Spark or dbt.
os.environ["WAL_LAKE_SPARK_DIR"] = str(_SCRATCH / "spark")
os.environ["DBT_TARGET_PATH"] = str(_SCRATCH / "dbt_target")
os.environ["DBT_LOG_PATH"] = str(_SCRATCH / "dbt_logs")
os.environ.setdefault("WAL_LAKE_CORES", "2")
os.environ["WAL_LAKE_TARGET"] = "local"
# No typed mirror models but the ones a test writes: the `schemas` fixture names a directory per
# module. Inside the project, as dbt needs them (python_jobs/mirrors.py), under the gitignored target/.
_MIRROR_MODELS = Path("target") / "test_mirror_models" / _SCRATCH.name
os.environ["WAL_LAKE_MIRROR_MODELS"] = str(_MIRROR_MODELS / "none")
atexit.register(shutil.rmtree, PROJECT_DIR / _MIRROR_MODELS, ignore_errors=True)


def pytest_sessionfinish(session, exitstatus) -> None:
    """A passing session leaves nothing behind: its warehouse, metastore and dbt logs (about 70 MB a
    process) go when the process ends. A failing one keeps them for a look at its dbt logs."""
    if exitstatus == 0:
        atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"kept the failed session's warehouse and dbt logs: {_SCRATCH}")


# The suite runs in two workers, a module to a worker (pyproject.toml: -n 2 --dist loadfile). The
# longest modules go first, so that neither worker is left running one of them alone at the end; the
# fast tier's longest follow, for the same reason in `make check`.
SLOWEST_FIRST = (
    "test_faults",
    "test_cluster",
    "test_oracle_e2e",
    "test_follow",
    "test_models",
    "test_mirrors_exact",
    "test_resnapshot_models",
    "test_ingest_job",
    "test_mirrors",
    "test_replica_identity",
    "test_docs",
    "test_dbt_unit",
    "test_ingest_debezium",
    "test_bad_input",
    "test_ingest_wal2json",
    "test_wal2json_framing",
    "test_benchmark_peers",
)

# Marked `slow` here, whole modules, so that the modules need no marker of their own: the end-to-end
# runs of a minute or more on 2 cores (a real cluster, fault injection, the oracle's live workloads,
# the multi-batch dbt builds of the marts, the mirrors and the index identity, the job end to end on
# a score of landing zones, the docs site). `make check` leaves them out, and every test that needs
# the `postgres` fixture, so that it stays under five minutes on an idle 2-core machine.
SLOW_MODULES = frozenset(
    {
        "test_faults",
        "test_cluster",
        "test_oracle_e2e",
        "test_models",
        "test_ingest_job",
        "test_mirrors",
        "test_replica_identity",
        "test_docs",
        "test_unannounced_ddl",
        "test_seq_stamp",
        "test_mirrors_exact",
        "test_follow",
        "test_resnapshot_models",
    }
)
# Single tests of fast modules that run the job's batching end to end: two thirds of their module.
SLOW_TESTS = frozenset(
    {
        "test_ingest_debezium.py::test_positions_do_not_depend_on_the_batching",
        "test_ingest_debezium.py::test_a_batch_that_looks_up_landed_events_is_held_apart_from_wal_events",
        "test_ingest_debezium.py::test_a_landing_zone_of_one_topic_per_table_stops_the_run_naming_the_files",
    }
)


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if item.path.stem in SLOW_MODULES or f"{item.path.name}::{item.originalname}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        if "postgres" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)

    def rank(item) -> int:
        module = item.path.stem
        return SLOWEST_FIRST.index(module) if module in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: within a module, and among the rest, the usual order


@pytest.fixture(scope="session")
def scratch_dir() -> Path:
    return _SCRATCH


@pytest.fixture(scope="session")
def spark():
    os.chdir(PROJECT_DIR)
    from python_jobs.spark_session import get_spark

    session = get_spark("wal_lake_tests")
    yield session
    session.stop()


class Schemas(NamedTuple):
    raw: str  # the ingestion job's tables (dbt's sources)
    models: str  # dbt's models and seeds
    audit: str  # dbt's audit models (<models>_audit)
    mirror: str  # dbt's typed mirrors (<models>_mirror)


@pytest.fixture(scope="module")
def schemas(request):
    """Schemas of the test module's own, named after it (test_foo.py: foo_raw, foo, foo_audit,
    foo_mirror), for the ingestion job and for dbt (through the variables profiles.yml and the sources
    read): a module neither reads another's leftovers nor leaves any in the default schemas. Dropped
    first. The module's typed mirror models (python_jobs.mirrors) go to a directory of its own."""
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_")
    names = Schemas(raw=f"{name}_raw", models=name, audit=f"{name}_audit", mirror=f"{name}_mirror")
    spark = request.getfixturevalue("spark")
    for schema in names:
        spark.sql(f"drop schema if exists {schema} cascade")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WAL_LAKE_RAW_SCHEMA", names.raw)
        env.setenv("WAL_LAKE_SCHEMA", names.models)
        env.setenv("WAL_LAKE_MIRROR_MODELS", str(_MIRROR_MODELS / name))
        yield names


@pytest.fixture(scope="session")
def dbt(spark):
    """Run a dbt command in this process, on the test session's Spark. Returns the result."""
    from dbt.cli.main import dbtRunner

    def run(*args: str, expect_success: bool = True, callbacks=None):
        result = dbtRunner(callbacks=callbacks).invoke(
            [*args, "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR)]
        )
        if expect_success and not result.success:
            raise AssertionError(f"dbt {' '.join(args)} failed: {result.exception}")
        return result

    return run


@pytest.fixture(scope="session")
def postgres():
    """One throwaway Postgres 15 with wal2json for the whole test session (testkit/pg_server.py).

    Skips only when the server binaries or wal2json are missing; CI installs them first
    (scripts/setup.sh --postgres), so there it always runs."""
    from testkit.pg_server import PostgresServer, missing_requirements

    problem = missing_requirements()
    if problem:
        pytest.skip(problem)
    with PostgresServer() as server:
        yield server
