"""Secrets never reach a message: a DSN or a connection URL is shown with its password masked.

The capture job is run as a user runs it (a subprocess) against a port nobody listens on, so the
connection is refused and the error line is printed; no server is needed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from python_jobs.redact import MASK, mask_dsn

PROJECT_DIR = Path(__file__).resolve().parents[2]
SECRET = "s3cret-pw"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _capture(dsn: str, tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "python_jobs.capture", "--landing", str(tmp_path), "--once"]
    if env is None:
        args += ["--dsn", dsn]
    return subprocess.run(
        args,
        cwd=PROJECT_DIR,
        env=os.environ | (env or {}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "dsn",
    [
        "host=127.0.0.1 port={port} user=app password=" + SECRET,
        "host=127.0.0.1 port={port} user=app password='" + SECRET + " with space' connect_timeout=5",
        "postgresql://app:" + SECRET + "@127.0.0.1:{port}/app",
        "postgresql://app@127.0.0.1:{port}/app?password=" + SECRET,
    ],
)
def test_a_refused_connection_names_the_server_but_not_the_password(tmp_path, dsn):
    port = _free_port()
    result = _capture(dsn.format(port=port), tmp_path)
    assert result.returncode == 1
    assert SECRET not in result.stdout + result.stderr
    assert "cannot connect to Postgres" in result.stderr
    assert f"port={port}" in result.stderr and "user=app" in result.stderr
    assert f"password={MASK}" in result.stderr


def test_the_dsn_from_the_environment_is_masked_too(tmp_path):
    dsn = f"host=127.0.0.1 port={_free_port()} password={SECRET}"
    result = _capture(dsn, tmp_path, env={"WAL_LAKE_CAPTURE_DSN": dsn})
    assert result.returncode == 1
    assert SECRET not in result.stderr
    assert f"password={MASK}" in result.stderr


def test_a_dsn_that_does_not_parse_is_one_line_without_any_part_of_it(tmp_path):
    # libpq's own parse error quotes the word before the missing '=': here, half of the password.
    result = _capture(f"host=127.0.0.1 password=s3cret {SECRET}", tmp_path)
    assert result.returncode == 1
    assert SECRET not in result.stderr and "s3cret" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "connection string" in lines[0]


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        ("host=db user=app password=pw", f"user=app password={MASK} host=db"),
        ("host=db password='a \\' b' sslpassword=key", f"password={MASK} host=db sslpassword={MASK}"),
        ("postgresql://app:pw%40x@db:5433/app?sslmode=require", None),
        ("postgres://db/app?password=pw", None),
        ("jdbc:postgresql://db/metastore?user=hive&password=pw&ssl=true", None),
        ("jdbc:mysql://hive:pw@db:3306/metastore", None),
        ("jdbc:derby:;databaseName=.spark/metastore_db;create=true", None),
        ("", ""),
    ],
)
def test_mask_dsn(dsn, expected):
    masked = mask_dsn(dsn)
    if expected is not None:
        assert masked == expected
    assert "pw" not in masked.replace("postgres", "").replace("password", "")
    assert "key" not in masked


def test_mask_dsn_keeps_what_says_where(tmp_path):
    assert "host=db" in mask_dsn("postgresql://app:pw@db:5433/app")
    assert "port=5433" in mask_dsn("postgresql://app:pw@db:5433/app")
    assert mask_dsn("jdbc:mysql://hive:pw@db:3306/metastore") == f"jdbc:mysql://hive:{MASK}@db:3306/metastore"
    assert (
        mask_dsn("jdbc:postgresql://db/m?user=hive&password=pw&ssl=true")
        == f"jdbc:postgresql://db/m?user=hive&password={MASK}&ssl=true"
    )
    derby = "jdbc:derby:;databaseName=.spark/metastore_db;create=true"
    assert mask_dsn(derby) == derby
    assert mask_dsn("jdbc:derby:;databaseName=x;password=pw") == f"jdbc:derby:;databaseName=x;password={MASK}"


def test_a_held_metastore_names_its_url_without_the_password():
    from python_jobs.spark_session import _metastore_held

    url = f"jdbc:postgresql://db:5432/metastore?user=hive&password={SECRET}"
    message = str(_metastore_held({"spark.hadoop.javax.jdo.option.ConnectionURL": url}))
    assert SECRET not in message
    assert f"jdbc:postgresql://db:5432/metastore?user=hive&password={MASK}" in message
