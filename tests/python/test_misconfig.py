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
