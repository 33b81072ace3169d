"""The lag benchmark's measure: a change is visible from the Delta commit that makes it so."""

import json
from datetime import UTC, datetime, timedelta

from benchmarks.lag import Seen, commit_marks, lags, stamped_commits

T0 = datetime(2026, 11, 28, 8, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def write_log(table, commits: list[tuple[float, str | None]]) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True)
    for version, (seconds, metadata) in enumerate(commits):
        info = {"timestamp": int(at(seconds).timestamp() * 1000), "operation": "MERGE"}
        if metadata is not None:
            info["userMetadata"] = metadata
        lines = [json.dumps({"commitInfo": info}), json.dumps({"add": {"path": f"part-{version}.parquet"}})]
        (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def seen(seconds: float, seq: int, committed: float) -> Seen:
    return Seen(
        at=at(seconds),
        cycles=1,
        visible=at(committed),
        mirrors=None,
        shown_lag=None,
        pending=0,
        built=True,
        seq=seq,
    )


def test_a_change_is_visible_from_the_stamped_commit_that_applies_its_seq(tmp_path):
    table = tmp_path / "consumer_records"
    write_log(
        table,
        [
            (10.0, "wal_lake.consumed_seq=100,sequin_table_id=x"),
            (12.0, None),  # an unstamped commit (an optimize, say) shows nothing new
            (40.0, "wal_lake.consumed_seq=250,sequin_table_id=x"),
            (70.0, "wal_lake.consumed_seq=400,sequin_table_id=x"),
        ],
    )
    commits = stamped_commits(table)
    assert commits == [(at(10.0), 100), (at(40.0), 250), (at(70.0), 400)]

    # Statuses written a few seconds after each commit show the seq with its change's commit time;
    # none showed 400: its commit counts as showing only what 250 did.
    statuses = [seen(13.0, 100, 1.0), seen(44.0, 250, 30.0), seen(75.0, 399, 60.0)]
    marks = commit_marks(commits, statuses, "seq", "visible")
    assert marks == [(at(10.0), at(1.0)), (at(40.0), at(30.0)), (at(70.0), at(60.0))]

    changes = [(at(1.0), 2), (at(20.0), 1), (at(59.0), 1), (at(65.0), 1)]
    assert lags(changes, marks) == [9.0, 9.0, 20.0, 11.0, None]
