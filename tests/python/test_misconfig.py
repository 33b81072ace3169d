"""Misconfiguration from the user's shell: each mistake is one line that names what is wrong.

These run the real commands in subprocesses, as a user would, and fail before Spark starts, so they
are cheap. A wrong landing path, an unknown format and an unreadable file are covered in-process by
test_ingest_job.py::test_cli_fails_with_one_clear_line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]


def _run(args: list[str], env: dict[str, str], unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in unset} | env
    return subprocess.run(
        args, cwd=PROJECT_DIR, env=full_env, capture_output=True, text=True, timeout=300, check=False
    )


def test_missing_jars_fail_with_one_line_naming_the_jar_and_the_fix(tmp_path):
    empty_cache = tmp_path / "cache"
    empty_cache.mkdir()
    result = _run(
        [sys.executable, "-m", "python_jobs.ingest", "--landing", str(tmp_path)],
        {"WAL_LAKE_CACHE": str(empty_cache), "WAL_LAKE_SPARK_DIR": str(tmp_path / "spark")},
    )
    assert result.returncode == 2
    err = result.stderr.strip().splitlines()
    assert len(err) == 1, result.stderr
    assert str(empty_cache / "jars" / "delta-spark_4.2_2.13-4.4.0.jar") in err[0]
    assert "make setup" in err[0]


def test_cluster_profile_without_its_env_vars_names_the_missing_variable(tmp_path):
    result = _run(
        [
            str(PROJECT_DIR / ".venv" / "bin" / "dbt"),
            "parse",
            "--project-dir",
            str(PROJECT_DIR),
            "--profiles-dir",
            str(PROJECT_DIR),
        ],
        {
            "WAL_LAKE_TARGET": "cluster",
            "DBT_TARGET_PATH": str(tmp_path / "target"),
            "DBT_LOG_PATH": str(tmp_path / "logs"),
        },
        unset=("WAL_LAKE_THRIFT_HOST",),
    )
    assert result.returncode != 0
    assert "Env var required but not provided: 'WAL_LAKE_THRIFT_HOST'" in result.stdout + result.stderr


def test_cluster_profile_with_its_env_vars_parses(tmp_path):
    """The same command with the variable set succeeds: the failure above is the variable's, not
    the project's."""
    result = _run(
        [
            str(PROJECT_DIR / ".venv" / "bin" / "dbt"),
            "parse",
            "--project-dir",
            str(PROJECT_DIR),
            "--profiles-dir",
            str(PROJECT_DIR),
        ],
        {
            "WAL_LAKE_TARGET": "cluster",
            "WAL_LAKE_THRIFT_HOST": "127.0.0.1",
            "DBT_TARGET_PATH": str(tmp_path / "target"),
            "DBT_LOG_PATH": str(tmp_path / "logs"),
        },
    )
    assert result.returncode == 0, result.stdout[-2000:]


def test_a_second_process_on_the_local_warehouse_fails_with_one_line_before_spark_starts(tmp_path):
    """Derby alone lets two JVMs that boot it at the same moment both in; the lock beside the
    metastore refuses the second process every time, before it starts Spark."""
    from python_jobs.spark_session import SparkSetupError, hold_metastore

    conf = {
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={tmp_path}/metastore_db"
    }
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from python_jobs.spark_session import hold_metastore; "
            f"hold_metastore({conf!r}); print('held', flush=True); time.sleep(60)",
        ],
        cwd=PROJECT_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        try:
            hold_metastore(conf)
        except SparkSetupError as exc:
            message = str(exc)
        else:
            raise AssertionError("a second process took the metastore that another one holds")
        assert "cannot open the Hive metastore" in message and "\n" not in message
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone (killed): its lock went with it, and the warehouse is free again.
    hold_metastore(conf)


_JVM_ENV = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")


def _java_starts(options: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``java <options> -version`` with only ``env`` of the JVM's option variables set."""
    return _run(["java", *options, "-version"], env, unset=_JVM_ENV)


def test_the_local_driver_runs_the_parallel_collector_unless_its_environment_names_one(monkeypatch):
    """The local target picks the driver's collector only when the JVM's environment picks none: a
    JVM given two collectors (JAVA_TOOL_OPTIONS with -XX:+UseSerialGC, as the cluster test sets it,
    and the profile's) does not start."""
    from python_jobs.spark_session import local_spark_conf

    def driver_options(**env: str) -> list[str]:
        with monkeypatch.context() as patch:
            for name in _JVM_ENV:
                patch.delenv(name, raising=False)
            for name, value in env.items():
                patch.setenv(name, value)
            return local_spark_conf()["spark.driver.extraJavaOptions"].split()

    plain = driver_options()
    assert "-XX:+UseParallelGC" in plain
    started = _java_starts([*plain, "-XX:+PrintFlagsFinal"], {})
    assert started.returncode == 0, started.stderr
    assert any(line.split()[1:4] == ["UseParallelGC", "=", "true"] for line in started.stdout.splitlines())

    serial = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    assert _java_starts(plain, {"JAVA_TOOL_OPTIONS": serial}).returncode != 0  # two collectors
    for name in _JVM_ENV:
        options = driver_options(**{name: serial})
        assert "-XX:+UseParallelGC" not in options, name
        assert "-Dlog4j2.configurationFile=conf/log4j2.properties" in options
        started = _java_starts(options, {name: serial})
        assert started.returncode == 0, (name, started.stderr)
