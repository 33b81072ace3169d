"""The oracle, end to end: a real Postgres, live capture, ingestion, dbt; models equal Postgres.

Twenty seeded random workloads, each in its own database and slot (its own source_id), run on one
throwaway server (testkit/soak.py: concurrent sessions, an initial snapshot taken while they
write, a capture killed with SIGKILL, a capture that dies before advancing its slot so its files
are replayed). Some files are also copied under a second name. The landing zone is ingested and
built in two rounds (ten seeds, then ten more and a rerun over everything), incrementally. Then for
every seed: consumer_records equals `select * from t` value for value, and sequin_events holds
exactly the changes Postgres decoded, once each, in commit order.
"""

from __future__ import annotations

import argparse
import json
import shutil

import psycopg
import pytest

from python_jobs.demo import consumer_state, spark_query
from python_jobs.ingest import job as ingest
from python_jobs.lsn import parse_lsn
from testkit import oracle, soak

SEEDS = range(1, 21)
ACTIONS = {"I": "insert", "U": "update", "D": "delete", "T": "truncate", "M": "message", "R": "read"}


def decoded_positions(lines: list[str]) -> list[tuple[int, int, str]]:
    """(commit_lsn, commit_idx, action) of every distinct change in the landed lines, commit order."""
    positions = set()
    for lsn, tx in soak.transactions_of(lines).items():
        changes = [json.loads(line)["action"] for line in tx[1:-1]]
        positions.update((lsn, idx, ACTIONS[a]) for idx, a in enumerate(changes))
    return sorted(positions)


def run_seeds(dsn: str, seeds, landing) -> dict[str, dict]:
    args = argparse.Namespace(transactions=120, sessions=3)
    truth = {}
    for seed in seeds:
        problems, summary = soak.run_seed(dsn, seed, args, landing)
        assert not problems, problems[:5]
        source_id = f"soak_{seed}.soak_{seed}"
        files = sorted((landing / source_id).glob("*.jsonl"))
        if seed % 3 == 0 and len(files) > 2:  # a file copied twice, under a name that sorts after it
            shutil.copy(files[1], files[1].with_name(files[1].stem + "_copy.jsonl"))
        with psycopg.connect(soak.with_dbname(dsn, f"soak_{seed}")) as conn:
            tables = oracle.user_tables(conn)
            types, keys = oracle.table_types(conn, tables)
            state = oracle.postgres_state(conn, tables)
        lines = [line for path in files for line in path.read_text().splitlines()]
        truth[source_id] = {
            "state": state,
            "types": types,
            "keys": keys,
            "positions": decoded_positions(lines),
        }
    return truth


@pytest.mark.postgres
def test_models_equal_postgres_after_live_capture(postgres, spark, dbt, schemas, tmp_path):
    landing = tmp_path / "landing"
    truth = run_seeds(postgres.dsn(), SEEDS[:10], landing)
    first = ingest.run(spark, str(landing), schema=schemas.raw)
    assert first.balanced and first.rejected == 0, first.line()
    dbt("seed")
    dbt("run", "--full-refresh", "-s", "+consumer_records", "+sequin_violations")

    truth |= run_seeds(postgres.dsn(), SEEDS[10:], landing)
    second = ingest.run(spark, str(landing), schema=schemas.raw)
    again = ingest.run(spark, str(landing), schema=schemas.raw)
    assert second.balanced and second.rejected == 0, second.line()
    assert again.files == 0 and again.landed == 0, again.line()
    dbt("run", "-s", "+consumer_records", "+sequin_violations")
    dbt("run", "-s", "+consumer_records", "+sequin_violations")  # a rerun with nothing new
    dbt("test", "-s", "sequin_events", "consumer_records", "sequin_violations", "--exclude", "test_type:unit")

    problems = []
    for source_id, t in sorted(truth.items()):
        expected = {table: rows for table, rows in t["state"].items()}
        actual = consumer_state(spark_query(spark), schemas.models, source_id)
        for table in expected:
            actual.setdefault(table, [])
        problems += [
            f"{source_id}: {p}" for p in oracle.compare_states(expected, actual, t["types"], t["keys"])
        ]
        sequin = [
            (r.commit_lsn, r.commit_idx, r.action)
            for r in spark.sql(
                f"select commit_lsn, commit_idx, action from {schemas.models}.sequin_events "
                f"where source_id = '{source_id}' order by seq"
            ).collect()
        ]
        if sequin != t["positions"]:
            problems.append(f"{source_id}: sequin_events differs from the decoded changes")
    assert not problems, problems[:20]
    assert len(truth) == len(SEEDS)


def test_decoded_positions_counts_every_change_once():
    tx = [
        '{"action":"B","xid":1,"lsn":"0/10"}',
        '{"action":"I","xid":1,"lsn":"0/8"}',
        '{"action":"U","xid":1,"lsn":"0/9"}',
        '{"action":"C","xid":1,"lsn":"0/10"}',
    ]
    assert decoded_positions(tx + tx) == [(16, 0, "insert"), (16, 1, "update")]
    assert parse_lsn("0/10") == 16
