"""Fault injection in CI: the pipeline (ingestion job + dbt run, one process) killed with SIGKILL at
random points (one of them mid-merge of a model), then, after every file was delivered again, two
pipelines started at once; after each the warehouse equals an undisturbed run's, row for row
(testkit/faults/). A reduced number of kills runs here; ``scripts/faults.sh`` runs many more.

The undisturbed reference runs on this test session's Spark, in schemas of its own that it drops
afterwards; the faulted pipelines run in processes of their own, with their own warehouse (the
faulted process that completes round 1 runs on into round 2 and is killed there)."""

from __future__ import annotations

import io
import os

from testkit import faults

KILLS = int(os.environ.get("WAL_LAKE_FAULT_KILLS", "2"))
SEED = int(os.environ.get("WAL_LAKE_FAULT_SEED", "11"))


def test_killed_concurrent_and_replayed_runs_converge_to_the_undisturbed_result(spark, tmp_path):
    out = io.StringIO()
    report = faults.inject(
        spark, tmp_path, kills=KILLS, seed=SEED, transactions=80, max_files_per_batch=0, out=out
    )
    log = out.getvalue()
    print(log)

    # The faults happened: processes died at their kill points, and the runs at once really overlapped.
    assert report.injected >= KILLS - 1, log
    assert any(k.happened and k.at != "nothing written yet" for k in report.kills), log
    assert len(report.concurrent_exit_codes) == 2
    # A run that gave way says why, in one line.
    for error in report.concurrent_errors:
        assert "cannot open the Hive metastore" in error, error

    # After each: the undisturbed result, nothing lost, nothing twice.
    phases = [c.split(":")[0] for c in report.comparisons]
    assert "round 1" in phases, report.comparisons
    assert any(p.startswith("round 2") for p in phases), report.comparisons
    # The whole landing zone replayed: here landed by the run that goes through of the two at once.
    assert any("all files replayed" in p for p in phases), report.comparisons
    assert report.replayed_lines > 0
    assert all(c.endswith(": equal") for c in report.comparisons), report.comparisons
    assert (report.rows_lost, report.rows_duplicated) == (0, 0)
    assert report.rows_compared > 1000 and report.ok
