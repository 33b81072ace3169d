"""One place that builds the Spark session every wal_lake job and test uses.

The Spark settings live once, in ``profiles.yml`` (the ``local`` target's
``server_side_parameters``), so that the ingestion job, the tests and dbt's embedded session open
the same warehouse and metastore with the same Delta configuration. dbt-spark's session method
calls ``SparkSession.builder.getOrCreate()``: a dbt invocation inside a process that already holds
this session reuses it instead of starting a second JVM.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import sys
from pathlib import Path
from typing import IO

import jinja2
import yaml

from python_jobs.redact import mask_dsn

PROJECT_DIR = Path(__file__).resolve().parent.parent
PROFILE_NAME = "wal_lake"

# dbt-spark forces this on every session it opens (dbt-spark >= 1.10.1); jobs match it so that
# SQL behaves the same inside and outside dbt.
FORCED_CONFS = {"spark.sql.ansi.enabled": "false"}


class SparkSetupError(RuntimeError):
    """The local Spark runtime is not ready (missing jars, unreadable profile, warehouse in use)."""


# The lock files this process holds, by path: one per embedded metastore it opened (hold_metastore).
_HELD: dict[Path, IO[str]] = {}


def _env_var(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise SparkSetupError(f"profiles.yml needs the environment variable {name}, which is not set")
    return value


def local_spark_conf(profiles_path: Path | None = None, target: str = "local") -> dict[str, str]:
    """The ``server_side_parameters`` of a session target of ``profiles.yml``, rendered."""
    path = profiles_path or PROJECT_DIR / "profiles.yml"
    try:
        profiles = yaml.safe_load(path.read_text())
        outputs = profiles[PROFILE_NAME]["outputs"]
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise SparkSetupError(f"cannot read profile '{PROFILE_NAME}' from {path}: {exc}") from exc
    if target not in outputs:
        raise SparkSetupError(f"{path}: profile '{PROFILE_NAME}' has no target '{target}'")
    params = outputs[target].get("server_side_parameters") or {}
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    conf = {str(k): env.from_string(str(v)).render(env_var=_env_var) for k, v in params.items()}
    conf.update(FORCED_CONFS)
    return conf


def check_jars(conf: dict[str, str]) -> None:
    """Fail with one line naming the missing jar instead of Spark's late ClassNotFound."""
    missing = [jar for jar in conf.get("spark.jars", "").split(",") if jar and not Path(jar).is_file()]
    if missing:
        raise SparkSetupError(
            f"Delta Lake jar not found: {missing[0]}. Run 'make setup' (it fetches the jars from Maven "
            "Central into $WAL_LAKE_CACHE/jars, default ~/.cache/wal_lake/jars)."
        )


def extra_spark_conf() -> dict[str, str]:
    """``WAL_LAKE_SPARK_CONF="key=value,key=value"``: settings for one run (say, ``spark.cores.max``
    on a standalone cluster) on top of the profile's."""
    extra = {}
    for item in filter(None, (part.strip() for part in os.environ.get("WAL_LAKE_SPARK_CONF", "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SparkSetupError(f"WAL_LAKE_SPARK_CONF: '{item}' is not key=value")
        extra[key.strip()] = value.strip()
    return extra


def get_spark(app_name: str = "wal_lake", extra_conf: dict[str, str] | None = None):
    """The process's Spark session with Hive support and Delta, created on first call."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    conf = local_spark_conf()
    # A session for a cluster master (spark-submit --master ...) keeps the master it was given.
    if os.environ.get("WAL_LAKE_SPARK_MASTER"):
        conf["spark.master"] = os.environ["WAL_LAKE_SPARK_MASTER"]
    else:
        use_this_python_in_workers()
    conf["spark.app.name"] = app_name
    conf.update(extra_spark_conf())
    conf.update(extra_conf or {})
    check_jars(conf)
    hold_metastore(conf)
    # PySpark logs every failed statement as a large JSON document, dbt's expected existence
    # checks included; the error itself still reaches the caller.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    builder = SparkSession.builder.enableHiveSupport()
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    open_metastore(session, conf)
    return session


def use_this_python_in_workers() -> None:
    """Spark's Python workers on this machine run this process's interpreter (the project's virtual
    environment), not whatever ``python3`` is first on the PATH. A batch's small frames built from
    Python rows go through those workers, and PySpark refuses a worker of another minor version
    (PYTHON_VERSION_MISMATCH): on a machine whose ``python3`` is 3.12, every batch would fail.
    ``PYSPARK_PYTHON``, when set, still wins."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def _metastore_held(conf: dict[str, str]) -> SparkSetupError:
    url = mask_dsn(conf.get("spark.hadoop.javax.jdo.option.ConnectionURL", "")) or "the configured metastore"
    return SparkSetupError(
        f"cannot open the Hive metastore ({url}): another Spark process (a dbt run, an ingestion "
        "job) probably holds it; the local target admits one Spark process at a time "
        "(docs/operations.md, 'One Spark process at a time'): wait for it, or use another "
        "WAL_LAKE_SPARK_DIR"
    )


def hold_metastore(conf: dict[str, str]) -> None:
    """Take the embedded Derby metastore of ``conf`` for this process, or fail with one line.

    Derby refuses a second JVM, but not always: two processes that boot it at the same moment can
    both get in (two pipelines started together both planned the same batch, and Delta's
    concurrency control failed one of them with a ConcurrentTransactionException). An exclusive
    lock on a file beside the metastore, taken before Spark starts, makes the rule hold every time;
    the kernel releases it when the process ends, however it ends. Nothing to do for a metastore
    that is not an embedded Derby."""
    url = conf.get("spark.hadoop.javax.jdo.option.ConnectionURL", "")
    match = re.match(r"jdbc:derby:;?databaseName=([^;]+)", url)
    if match is None:
        return
    path = Path(match.group(1)).resolve().with_name("wal_lake.lock")
    if path in _HELD:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise _metastore_held(conf) from None
    _HELD[path] = handle


def open_metastore(session, conf: dict[str, str]) -> None:
    """Open the metastore now, so that a metastore held by another process fails here with one line
    rather than at the job's first table lookup with a long Hive trace."""
    try:
        session.catalog.listDatabases()
    except Exception as exc:
        if "HiveMetaStoreClient" not in str(exc) and "metastore" not in str(exc).lower():
            raise
        session.stop()
        raise _metastore_held(conf) from exc
