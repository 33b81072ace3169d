"""The `cluster` target on a real Spark cluster: scripts/cluster.sh starts a standalone master, a worker
and the Thrift Server on loopback; the ingestion job runs on that cluster; `dbt build --target
cluster` builds and tests the models through the Thrift Server; consumer_records must equal the
sample's expected state, as on the local target (python_jobs.demo checks the same).

Everything runs in other processes (the cluster's JVMs, the ingestion job, dbt), so this test does not
use the suite's Spark session."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parents[2]
CLUSTER_SH = PROJECT_DIR / "scripts" / "cluster.sh"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], env: dict[str, str], timeout: int = 600) -> str:
    done = subprocess.run(
        cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{output[-4000:]}"
    return output


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("cluster")
    ports = {name: _free_port() for name in ("MASTER", "THRIFT", "MASTER_UI", "WORKER_UI")}
    env = dict(os.environ)
    env.update({f"WAL_LAKE_{name}_PORT": str(port) for name, port in ports.items()})
    env.update(
        WAL_LAKE_CLUSTER_DIR=str(state),
        WAL_LAKE_TARGET="cluster",
        WAL_LAKE_THRIFT_HOST="127.0.0.1",
        DBT_TARGET_PATH=str(state / "dbt_target"),
        DBT_LOG_PATH=str(state / "dbt_logs"),
    )
    try:
        _run(["bash", str(CLUSTER_SH), "start"], env, timeout=300)
        yield {"env": env, "state": state, "ports": ports}
    finally:
        subprocess.run(["bash", str(CLUSTER_SH), "stop"], cwd=PROJECT_DIR, env=env, timeout=120, check=False)


def test_ingestion_and_dbt_build_on_the_cluster_give_the_expected_state(cluster, tmp_path):
    env, ports = cluster["env"], cluster["ports"]
    landing = tmp_path / "landing"
    sample = [sys.executable, "-m", "testkit.sample", "--out", str(landing), "--transactions", "120"]
    _run(sample, env)
    manifest = json.loads((landing / "manifest.json").read_text())

    out = _run(["bash", str(CLUSTER_SH), "ingest", "--", "--landing", str(landing)], env)
    assert "[ok]" in out and "5 raw tables registered" in out, out[-2000:]
    # The job ran as an application of the standalone master (executors on the worker), and the
    # Thrift Server is one too.
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['MASTER_UI']}/json/", timeout=10) as page:
        master = json.load(page)
    assert "wal_lake_ingest" in {app["name"] for app in master["completedapps"]}, master
    assert "wal_lake_thrift" in {app["name"] for app in master["activeapps"]}, master

    dbt = [str(PROJECT_DIR / ".venv" / "bin" / "dbt")]
    _run([*dbt, "seed"], env)
    _run([*dbt, "run", "--empty"], env)  # unit tests of incremental models read the model's table
    build = _run([*dbt, "build"], env, timeout=900)
    assert "ERROR=0" in build and "PASS=" in build, build[-3000:]

    verify = _run([sys.executable, "-m", "python_jobs.cluster", "verify", "--landing", str(landing)], env)
    assert "consumer_records equal the expected state" in verify, verify

    # One statement, one client process: each process costs a Python start-up and a Thrift session.
    counts = _run(
        [
            sys.executable,
            "-m",
            "python_jobs.cluster",
            "query",
            "select"
            " (select count(*) from wal_lake.sequin_events where source_id = 'shop_wal2json'),"
            " (select count(*) from wal_lake_raw.wal_rejects),"
            " (select count(*) from wal_lake_audit.sequin_violations)",
        ],
        env,
    )
    sequin_w2j, rejects, violations = map(int, counts.strip().splitlines()[-1].split("\t"))

    w2j = manifest["sources"]["shop_wal2json"]
    assert w2j["pending_lines"] == 0
    assert sequin_w2j == w2j["distinct_positions"]
    assert rejects == sum(s["expected_rejects"] for s in manifest["sources"].values())
    assert violations == 0
