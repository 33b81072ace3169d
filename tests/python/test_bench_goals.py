"""The benchmark's verdicts follow from its stages: ``benchmarks.goals.evaluate`` on hand-made stage
timings (no Spark, no zone) gives each goal its measured figure and verdict, adds the derived stages
(end to end, incremental totals, the floor's increment), and leaves out a goal whose stages did not
run; ``benchmarks.report`` prints them."""

from __future__ import annotations

from benchmarks.goals import evaluate
from benchmarks.report import report, summary
from benchmarks.results import Results, Stage

MARTS = "dbt run of the marts"
SEQ = "sequin_events (its model in the marts' run)"
STATE = "state step (its models in the marts' run)"
BUILD = "plain dbt build"


def timed(**seconds_by_name: float) -> Results:
    """A 1M run with its increment of 10k whose stages took the given seconds (names as measured)."""
    results = Results(command="python -m benchmarks.run", changes=1_000_000, increment=10_000, knobs={})
    for name, seconds in seconds_by_name.items():
        changes = 10_000 if "+10k" in name else 1_000_000
        results.stages.append(Stage(name, seconds, changes, peak_mb=1000.0))
    return results


def full_run() -> Results:
    results = _full_timings()
    mirrors = results.stage("[1M] +10k dbt run mirrors")
    mirrors.seconds, mirrors.model_seconds = 4.4, 4.0  # the run, and its models without dbt's own work
    return results


def _full_timings() -> Results:
    return timed(
        **{
            "raw parse (read.text + from_json + count)": 8.0,
            "[1M] ingest": 4.0,
            f"[1M] {MARTS}": 12.0,
            f"[1M] {SEQ}": 5.5,
            f"[1M] {STATE}": 6.0,
            "[100k] +10k ingest": 1.0,
            f"[100k] +10k {MARTS}": 5.0,
            "[1M] +10k ingest": 2.0,
            f"[1M] +10k {MARTS}": 6.0,
            f"[1M] +10k {STATE}": 3.0,
            "[1M] +10k dbt run mirrors": 4.0,
            "[floor] parse + Delta append": 2.0,
            "[floor] dbt run floor_log floor_state": 2.0,
            "[floor] +10k parse + Delta append": 1.0,
            "[floor] +10k dbt run floor_log floor_state": 1.0,
            "peer PySpark: log (parse, dedup, seq)": 5.0,
            "peer PySpark: state (flatten)": 10.0,
            "[1M] nothing new: ingest + one dbt run of the marts": 0.5,
            f"[1M] nothing new: {BUILD}": 30.0,
            "[100k] +10k then ingest": 1.0,
            f"[100k] +10k then {BUILD}": 9.0,
            "[1M] +10k then ingest": 2.0,
            f"[1M] +10k then {BUILD}": 10.0,
        }
    )


def test_each_goal_gets_its_figure_and_verdict_from_the_stages():
    results = full_run()
    evaluate(results, "1M", [100_000, 1_000_000], 10_000)
    goals = {what: (measured, met) for what, measured, met in results.goals}

    assert goals["end to end >= 50,000 changes/s at 1M"] == ("62,500 changes/s", True)  # 1M in 16 s
    assert goals["end to end <= 2.5x raw parse"] == ("2.0x (16.0s / 8.0s)", True)
    assert goals["incremental +10k on 1M <= 1.3x on 100k"] == ("1.33x (8.0s / 6.0s)", False)
    # The mirrors' models against the state step's, each in its run (the mirrors' run took 4.4 s).
    assert goals["mirrors' +10k on 1M <= the state step's (source_records, consumer_records), models"] == (
        "1.33x (4.0s / 3.0s)",
        False,
    )
    assert goals[f"{SEQ} <= 1.2x peer PySpark log (parse, dedup, seq)"] == ("1.10x (5.5s / 5.0s)", True)
    assert goals[f"{STATE} <= 1.2x peer PySpark state (flatten)"] == ("0.60x (6.0s / 10.0s)", True)
    assert goals["(info) end to end vs the floor's (append + one dbt run)"] == (
        "4.00x (4.0s, 0.50x raw parse)",
        True,
    )
    assert goals["(info) +10k on 1M vs the floor's +10k"] == ("4.00x (8.0s / 2.0s)", True)
    assert goals["(info) wal_lake end to end vs whole peer PySpark job"] == ("1.07x", True)
    # What a user schedules: with nothing new against the floor's +10k; the plain build's +10k flat.
    assert goals["nothing new: ingest + one dbt run of the marts on 1M <= 0.5x the floor's +10k"] == (
        "0.25x (0.5s / 2.0s)",
        True,
    )
    assert goals[f"nothing new: {BUILD} on 1M <= 10x the floor's +10k"] == ("15.00x (30.0s / 2.0s)", False)
    assert goals["ingest + plain build's +10k on 1M <= 1.3x on 100k"] == ("1.20x (12.0s / 10.0s)", True)

    derived = {s.name: s.seconds for s in results.stages[-6:]}
    assert derived == {
        "[1M] end to end (ingest + one dbt run of the marts)": 16.0,
        "[100k] +10k incremental total": 6.0,
        "[1M] +10k incremental total": 8.0,
        "[floor] +10k total": 2.0,
        "[100k] +10k then ingest + plain build": 10.0,
        "[1M] +10k then ingest + plain build": 12.0,
    }

    text = report(results, parse_seconds=8.0)
    assert "NOT MET  incremental +10k on 1M <= 1.3x on 100k" in text
    assert "MET      end to end >= 50,000 changes/s at 1M" in text
    assert summary(results, wide=False, seconds=60).strip() == (
        "bench: 1M changes (narrow), 9 goals, 6 met, 0 checks failed, 60s in all"
    )


def test_a_goal_whose_stages_did_not_run_is_left_out():
    # --skip-peers --skip-floor --skip-mirrors, one history: only the end-to-end goals are judged.
    results = timed(
        **{
            "raw parse (read.text + from_json + count)": 8.0,
            "[1M] ingest": 4.0,
            f"[1M] {MARTS}": 12.0,
            "[1M] +10k ingest": 2.0,
            f"[1M] +10k {MARTS}": 6.0,
        }
    )
    evaluate(results, "1M", [1_000_000], 10_000)

    assert [what for what, _, _ in results.goals] == [
        "end to end >= 50,000 changes/s at 1M",
        "end to end <= 2.5x raw parse",
    ]
    assert [s.name for s in results.stages[-2:]] == [
        "[1M] end to end (ingest + one dbt run of the marts)",
        "[1M] +10k incremental total",
    ]
