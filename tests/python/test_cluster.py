"""The `cluster` target on a real Spark cluster: scripts/cluster.sh starts a standalone master, a worker
and the Thrift Server on loopback; the ingestion job runs on that cluster; sessions that close at the
same moment close cleanly and leave the server answering (Hive's LLAP jar); `dbt build --target
cluster` builds and tests the models through the Thrift Server, the unit tests run there too, and a
second run of the incremental models merges on top of the first; consumer_records must equal the
sample's expected state, as on the local target (python_jobs.demo checks the same). No query of the
ingestion job or of the Thrift Server has a window without a partition (Spark's warning that it puts
all rows in one task), checked in their logs against a probe query that has one.

Everything runs in other processes (the cluster's JVMs, the ingestion job, and one client process for
dbt and the checks: this file run as a script), so this test does not use the suite's Spark session.
Each client process costs a Python and dbt start-up and its own Thrift sessions, hence only one."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # run as the cluster's client (a script of its own): the project's packages
    sys.path.insert(0, str(PROJECT_DIR))

from python_jobs.ingest.ledger import DEFAULT_SCHEMA as RAW_SCHEMA  # noqa: E402

CLUSTER_SH = PROJECT_DIR / "scripts" / "cluster.sh"
RESULT = "cluster-client-result: "

# The client's steps, in order, in one dbt process. The unit tests of the incremental models read
# the model's own table (`input: this`), so they run once the build has made it; the second run of
# the incremental models then takes their incremental path through the Thrift Server (the consumed
# positions and the stamp read back from Delta's history, the merge, the post-hook).
DBT_STEPS = (
    ("build", ["build", "--exclude-resource-type", "unit_test"]),
    ("unit", ["test", "--select", "test_type:unit"]),
    ("incremental", ["run", "--select", "sequin_events", "source_records", "consumer_records"]),
)
# Spark's warning for a window without a partition: all its rows in one task. No step may have one.
ONE_TASK_WINDOW = "No Partition Defined for Window operation"
# A window without a partition, on three rows, asked of the Thrift Server after the steps: it must
# log the warning (Spark logs it each time it plans the window), so that finding none in what the
# server logged before it means something.
ONE_TASK_PROBE = "select id, row_number() over (order by id) as n from range(3)"
COUNTS_SQL = (
    "select"
    " (select count(*) from wal_lake.sequin_events where source_id = 'shop_wal2json'),"
    f" (select count(*) from {RAW_SCHEMA}.wal_rejects),"
    " (select count(*) from wal_lake_audit.sequin_violations)"
)


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


def server_warnings(state: Path, max_chars: int = 8000) -> str:
    """The end of the Thrift Server's warnings and errors (with the frames the log keeps), for a
    failure's message: what dbt reports of a failed call is the client's side only."""
    noise = "Failed to cancel job group"  # logged for every operation closed after its job ended
    log = state / "thrift.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    kept = [
        line
        for line in lines
        if (" WARN " in line or " ERROR " in line or line.startswith(("\t", "java.", "org.")))
    ]
    return "\n".join(line for line in kept if noise not in line)[-max_chars:]


def concurrent_sessions(threads: int = 4, rounds: int = 10, timeout: float = 120) -> dict:
    """Sessions that each run a metastore query and then close at the same moment as the others', as
    dbt's threads do when they list schemas. A close that overlaps another one can make the server
    load Hive's function registry; without Hive's LLAP jar on its class path (scripts/setup.sh) that
    close fails, and the next one hangs. The statements run in the background, as dbt's do (a
    statement on the session's own thread lets its close close the server's shared metastore client
    under another session's statement: python_jobs.cluster.query)."""
    from python_jobs import cluster

    errors: list[str] = []
    closed = [0] * threads  # each thread counts its own
    aligned = threading.Barrier(threads)

    def work(n: int) -> None:
        for _ in range(rounds):
            try:
                conn = cluster.connect()
                cluster.query(f"show table extended in {RAW_SCHEMA} like 'x{n}*'", conn)
                aligned.wait(timeout)
                conn.close()
                closed[n] += 1
            except Exception as exc:  # noqa: BLE001 - what the server answered is the result
                errors.append(f"{type(exc).__name__}: {str(exc)[:300]}")
                aligned.abort()
                return

    workers = [threading.Thread(target=work, args=(n,), daemon=True) for n in range(threads)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + timeout
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    return {"closed": sum(closed), "errors": errors, "hung": sum(w.is_alive() for w in workers)}


def client(landing: Path) -> dict:
    """Concurrent sessions, the dbt steps, the state check and the counts, on the cluster; what each
    gave, as JSON."""
    from dbt.cli.main import dbtRunner

    from python_jobs import cluster
    from testkit import warehouse

    report: dict = {"sessions": concurrent_sessions(), "steps": {}}
    if report["sessions"]["errors"] or report["sessions"]["hung"]:
        return report
    runner = dbtRunner()
    for name, args in DBT_STEPS:
        result = runner.invoke(args)
        nodes = list(getattr(result.result, "results", None) or [])
        report["steps"][name] = {
            "success": result.success,
            "exception": None if result.exception is None else str(result.exception)[:2000],
            "statuses": sorted({str(n.status) for n in nodes}),
            "types": sorted({n.node.resource_type for n in nodes}),
            "count": len(nodes),
            "failed": [n.node.unique_id for n in nodes if str(n.status) not in ("success", "pass")],
            # What dbt said of each node that errored or failed (a skipped node says nothing).
            "errors": {
                n.node.unique_id: str(n.message)[:1500] for n in nodes if str(n.status) in ("error", "fail")
            },
            # The models whose SQL took their incremental path: it reads the model's own table, or
            # (source_records with no truncate in its run) selects the flag by which its merge lays
            # the run's updates over the stored records instead.
            "incremental_sql": sorted(
                n.node.name
                for n in nodes
                if n.node.resource_type == "model"
                and (
                    n.node.relation_name in (n.node.compiled_code or "")
                    or "lays_over_stored" in (n.node.compiled_code or "")
                )
            ),
        }
        if not result.success:
            return report
    # The helpers' command lines, in this process: the sample's check (the harness's), then the product's.
    helpers = (
        ("verify", warehouse.main, ["--landing", str(landing)]),
        ("query", cluster.main, ["query", COUNTS_SQL]),
        ("probe", cluster.main, ["query", ONE_TASK_PROBE]),
        # A statement the server fails: the polled query says so, and the command exits 1.
        ("failing", cluster.main, ["query", "select * from wal_lake.no_such_table"]),
    )
    server_log = Path(os.environ["WAL_LAKE_CLUSTER_DIR"]) / "thrift.log"
    for name, command, argv in helpers:
        # Where the server's log ends before the helper: what it logs comes after.
        log_from = server_log.stat().st_size
        printed, complained = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(complained):
            exit_code = command(argv)
        report[name] = {
            "exit": exit_code,
            "out": printed.getvalue(),
            "err": complained.getvalue(),
            "log_from": log_from,
        }
    return report


def cluster_env(state: Path) -> tuple[dict[str, str], dict[str, int]]:
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
    # Every JVM of the test (daemons, launchers, drivers, the executors the worker forks) lives for
    # minutes on small data, on a 2-core box: the optimizing JIT and parallel GC threads would spend
    # CPU the queries need, for code that runs only a few times. The fault test's short-lived JVMs
    # take the same JIT options: C1 only, with the usual 240 MB code cache (C1 alone gets 48 MB, which
    # a whole build's generated code fills in the Thrift Server: "Out of space in CodeCache").
    from testkit.faults import STEP_JVM_OPTIONS

    tuned = f"{STEP_JVM_OPTIONS} -XX:+UseSerialGC"
    env["JAVA_TOOL_OPTIONS"] = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} {tuned}".strip()
    return env, ports


def test_ingestion_and_dbt_build_on_the_cluster_give_the_expected_state(tmp_path):
    from testkit import sample

    state = tmp_path / "cluster"
    env, ports = cluster_env(state)
    landing = tmp_path / "landing"
    started = subprocess.Popen(
        ["bash", str(CLUSTER_SH), "start"],
        cwd=PROJECT_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # The sample is written while the cluster's JVMs start.
        sample.main(["--out", str(landing), "--transactions", "120"])
        manifest = json.loads((landing / "manifest.json").read_text())
        out, _ = started.communicate(timeout=300)
        assert started.returncode == 0, f"cluster.sh start exited {started.returncode}:\n{out[-4000:]}"
        # The server's root for its operations' logs, made as it starts (and removed as it stops):
        # under the cluster's state, not in the temporary directory.
        assert (state / "operation_logs").is_dir(), sorted(p.name for p in state.iterdir())

        out = _run(["bash", str(CLUSTER_SH), "ingest", "--", "--landing", str(landing)], env)
        assert "[ok]" in out and "5 raw tables registered" in out and "wal_frontier" in out, out[-2000:]
        # The ingestion job's driver logs to this output: no step of it numbers a batch in one task.
        assert ONE_TASK_WINDOW not in out, out[-4000:]
        # The job ran as an application of the standalone master (executors on the worker), and the
        # Thrift Server is one too.
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['MASTER_UI']}/json/", timeout=10) as page:
            master = json.load(page)
        assert "wal_lake_ingest" in {app["name"] for app in master["completedapps"]}, master
        assert "wal_lake_thrift" in {app["name"] for app in master["activeapps"]}, master

        out = _run([sys.executable, __file__, str(landing)], env, timeout=1200)
        lines = [line for line in out.splitlines() if line.startswith(RESULT)]
        assert lines, out[-4000:]
        report = json.loads(lines[-1][len(RESULT) :])
    finally:
        if started.poll() is None:
            started.kill()
        subprocess.run(["bash", str(CLUSTER_SH), "stop"], cwd=PROJECT_DIR, env=env, timeout=120, check=False)

    server = server_warnings(state)
    # Hive's client keeps a directory per session: cluster.sh puts them under the cluster's state,
    # not in the temporary directory.
    hive_dirs = [p.name for p in (state / "hive_resources").glob("*")]
    assert hive_dirs and all(name.endswith("_resources") for name in hive_dirs), hive_dirs
    sessions = report["sessions"]
    assert sessions == {"closed": 40, "errors": [], "hung": 0}, (sessions, server)
    steps = report["steps"]
    errors = {name: step["errors"] for name, step in steps.items() if step["errors"]}
    assert not errors, (errors, out[-4000:], server)
    assert list(steps) == [name for name, _ in DBT_STEPS], (report, out[-4000:], server)
    for name, step in steps.items():
        assert step["success"] and not step["failed"] and not step["exception"], (
            name,
            step,
            out[-4000:],
            server,
        )
    # The build builds and tests everything but the unit tests, which then all run (and pass).
    assert steps["build"]["types"] == ["model", "seed", "test"], steps["build"]
    assert steps["unit"]["types"] == ["unit_test"] and steps["unit"]["count"] >= 6, steps["unit"]
    # The build created the incremental models' tables; the second run took the incremental path
    # (consumer_records projects source_records and never reads itself).
    assert steps["build"]["incremental_sql"] == [], steps["build"]
    incremental_sql = steps["incremental"]["incremental_sql"]
    assert incremental_sql == ["sequin_events", "source_records"], steps["incremental"]

    # Every query of the build, the unit tests, the incremental run and the other helpers was
    # planned by the Thrift Server before the probe: no window without a partition among them; the
    # probe's is logged.
    server_log = (state / "thrift.log").read_bytes()
    cut = report["probe"]["log_from"]
    before, after = server_log[:cut].decode(errors="replace"), server_log[cut:].decode(errors="replace")
    assert report["probe"]["exit"] == 0, report["probe"]
    assert ONE_TASK_WINDOW in after, after[-2000:]
    one_task = [line for line in before.splitlines() if ONE_TASK_WINDOW in line]
    assert not one_task, one_task

    verify = report["verify"]
    assert verify["exit"] == 0 and "consumer_records equal the expected state" in verify["out"], out[-4000:]
    assert report["query"]["exit"] == 0, out[-4000:]
    sequin_w2j, rejects, violations = map(int, report["query"]["out"].strip().splitlines()[-1].split("\t"))
    w2j = manifest["sources"]["shop_wal2json"]
    assert w2j["pending_lines"] == 0
    assert sequin_w2j == w2j["distinct_positions"]
    assert rejects == sum(s["expected_rejects"] for s in manifest["sources"].values())
    assert violations == 0
    failing = report["failing"]
    assert failing["exit"] == 1 and failing["out"] == "", failing
    assert "cluster: error: the Thrift Server ended the statement in ERROR_STATE" in failing["err"], failing
    assert "no_such_table" in failing["err"], failing


if __name__ == "__main__":
    print(RESULT + json.dumps(client(Path(sys.argv[1]))), flush=True)
