"""The status command: per source, what the tables say of how far it has come.

One small wal2json sample, landed in two halves into the module's own warehouse: the first half
built by dbt, the second only landed, so the status must tell what is visible from what has landed.
"""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from python_jobs import status
from python_jobs.ingest import job as ingest
from python_jobs.lsn import format_lsn
from testkit import sample

SOURCE = "shop_wal2json"
BUILD = ("build", "--exclude-resource-type", "unit_test")


@pytest.fixture(scope="module")
def zone(tmp_path_factory) -> Path:
    """A generated sample (wal2json only), kept apart: tests move its files into their landing zone."""
    out = tmp_path_factory.mktemp("follow_sample")
    sample.generate(out, seed=11, transactions=40, formats=(sample.WAL2JSON,), lines_per_file=60)
    return out


def sample_files(zone: Path) -> list[Path]:
    return sorted(p for p in (zone / SOURCE).iterdir() if not p.name.startswith(("_", ".")))


def copy_in(files: list[Path], landing: Path) -> None:
    (landing / SOURCE).mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy(path, landing / SOURCE / path.name)


def one_value(spark, sql: str):
    return spark.sql(sql).first()[0]


def test_status_tells_what_is_visible_from_what_has_landed(spark, dbt, schemas, zone, tmp_path):
    from python_jobs import mirrors

    files = sample_files(zone)
    assert len(files) >= 4, files
    half = len(files) // 2
    landing = tmp_path / "landing"
    copy_in(files[:half], landing)
    ingest.run(spark, str(landing), schema=schemas.raw, out=io.StringIO())
    mirrors.generate(spark, schemas.raw)
    dbt(*BUILD)

    [built] = status.source_status(spark, schemas.raw, schemas.models)
    newest = spark.sql(
        f"select max_by(struct(seq, commit_lsn, committed_at), seq) from {schemas.models}.sequin_events"
    ).first()[0]
    frontier = one_value(spark, f"select max_by(frontier_lsn, batch_id) from {schemas.raw}.wal_frontier")
    assert built.source_id == SOURCE
    assert built.last_seq == newest.seq
    assert built.consumer_records == status.Position(newest.seq, newest.commit_lsn, newest.committed_at)
    assert built.mirror_count == 3  # the sample's three tables
    assert built.mirrors == built.consumer_records
    assert built.frontier_lsn == frontier == newest.commit_lsn
    assert built.rejects == one_value(spark, f"select count(*) from {schemas.raw}.wal_rejects")
    assert built.violations == 0
    assert built.built

    # The second half lands but is not built: the frontier moves, what is visible does not.
    copy_in(files[half:], landing)
    ingest.run(spark, str(landing), schema=schemas.raw, out=io.StringIO())
    [landed] = status.source_status(spark, schemas.raw, schemas.models)
    manifest = json.loads((zone / "manifest.json").read_text())["sources"][SOURCE]
    assert landed.frontier_lsn > built.frontier_lsn
    assert landed.consumer_records == built.consumer_records
    assert landed.mirrors == built.mirrors
    assert landed.last_seq == built.last_seq
    assert landed.rejects == manifest["expected_rejects"] > 0
    assert landed.pending == manifest["pending_lines"]
    assert not landed.built

    # The command prints the same, as JSON and as a table.
    with redirect_stdout(io.StringIO()) as out:
        assert status.main(["--json", "--raw-schema", schemas.raw, "--schema", schemas.models]) == 0
    [printed] = json.loads(out.getvalue())["sources"]
    assert printed["frontier_lsn"] == format_lsn(landed.frontier_lsn)
    assert printed["consumer_records"]["seq"] == built.consumer_records.seq
    assert printed["rejects"] == landed.rejects
    with redirect_stdout(io.StringIO()) as out:
        assert status.main(["--raw-schema", schemas.raw, "--schema", schemas.models]) == 0
    header, row = out.getvalue().splitlines()
    assert header.split()[:2] == ["source", "last"]
    assert row.split()[0] == SOURCE and format_lsn(landed.frontier_lsn) in row.split()
