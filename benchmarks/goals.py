"""The goals BENCHMARKS.md reports against, and their verdicts from one run's stages.

A goal is ``(what, measured, met)``, appended to the results in the order the report prints them:
end to end at the main size (a rate, and a multiple of the raw parse), the incremental cost's growth
from the smallest history to the largest, the mirrors' increment against the state step's, each mart
against the PySpark peer's step, then the floor, then what a user schedules (with nothing new, the
marts' run and the plain build against the floor's increment; the plain build's increment flat in
history). A line whose ``what`` starts with ``(info)`` is a ratio reported with no goal (always
"met"). Four stages are derived here from the measured ones: the end to end (the ingestion and one
dbt run of the marts), each history's incremental total (the same on the increment), the floor's,
and each history's scheduled increment (one ingestion and one plain build); a goal whose stages did
not run (``--skip-peers``, ``--skip-floor``, ...) is left out. A mart against its peer's step, and
the mirrors against the state step, compare the models' own seconds in their dbt run.
"""

from __future__ import annotations

from benchmarks.results import (
    FLOOR_APPEND,
    FLOOR_DBT,
    MARTS_RUN_STAGE,
    MARTS_STAGE,
    MIRROR_STAGE,
    PEER_LOG,
    PEER_STATE,
    PLAIN_BUILD_STAGE,
    RAW_PARSE,
    SEQ_MODEL_STAGE,
    STATE_MODELS,
    STATE_MODELS_STAGE,
    Results,
    Stage,
    short,
)

GOAL_E2E_RATE = 50_000  # changes/s end to end at 1M
GOAL_E2E_VS_PARSE = 2.5
GOAL_INCREMENTAL_GROWTH = 1.3
GOAL_MART_VS_PEER = 1.2
# With nothing new, against the floor's increment: one ingestion and the marts' run; the plain build.
GOAL_NOTHING_NEW_VS_FLOOR = 0.5
GOAL_PLAIN_BUILD_VS_FLOOR = 10

# The stages of wal_lake's pipeline up to both marts, after "[<size>] " (and "+<increment> "): the
# ingestion, then one dbt run of the marts.
MART_STAGES = ("ingest", MARTS_RUN_STAGE)
PEER_PYSPARK_LOG = f"peer PySpark: {PEER_LOG}"
PEER_PYSPARK_STATE = f"peer PySpark: {PEER_STATE}"


def evaluate(results: Results, main_tag: str, histories: list[int], increment: int) -> None:
    """Fill results.goals from the stages: (goal, measured, met)."""
    e2e = _end_to_end(results, main_tag)
    incs = _incremental(results, histories, increment)
    _mirrors(results, histories, increment)
    _marts_against_peer(results, main_tag)
    _floor(results, main_tag, e2e)
    _floor_increment(results, main_tag, increment, incs)
    _scheduled(results, main_tag, histories, increment)
    _whole_peer(results, main_tag)


def _marts(results: Results, tag: str) -> list[Stage | None]:
    """The history's ingest and its dbt run of the marts, then the marts' own seconds in that run:
    sequin_events', the state step's (None where one did not run)."""
    return [results.stage(f"[{tag}] {x}") for x in (*MART_STAGES, SEQ_MODEL_STAGE, STATE_MODELS_STAGE)]


def _end_to_end(results: Results, main_tag: str) -> Stage | None:
    """The end-to-end stage at the main size, its rate goal and its multiple of the raw parse."""
    ingest, marts, _, _ = _marts(results, main_tag)
    if not (ingest and marts):
        return None
    e2e = Stage(
        f"[{main_tag}] end to end (ingest + one dbt run of the marts)",
        ingest.seconds + marts.seconds,
        ingest.changes,
    )
    e2e.peak_mb = max(ingest.peak_mb, marts.peak_mb)
    results.stages.append(e2e)
    results.goals.append(
        (
            f"end to end >= {GOAL_E2E_RATE:,} changes/s at {main_tag}",
            f"{e2e.rate:,.0f} changes/s",
            e2e.rate >= GOAL_E2E_RATE,
        )
    )
    parse = results.stage(RAW_PARSE)
    if parse:
        ratio = e2e.seconds / parse.seconds
        results.goals.append(
            (
                f"end to end <= {GOAL_E2E_VS_PARSE}x raw parse",
                f"{ratio:.1f}x ({e2e.seconds:.1f}s / {parse.seconds:.1f}s)",
                ratio <= GOAL_E2E_VS_PARSE,
            )
        )
    return e2e


def _incremental(results: Results, histories: list[int], increment: int) -> dict[int, Stage]:
    """Each history's incremental total (a stage), by history; the growth goal from the smallest to
    the largest."""
    return _flat_in_history(results, histories, increment, MART_STAGES, "incremental total", "incremental")


def _flat_in_history(
    results: Results, histories: list[int], increment: int, parts: tuple[str, ...], total: str, what: str
) -> dict[int, Stage]:
    """Per history, the sum of its increment's ``parts`` (stage names after "[<size>] +<increment> ")
    as a stage named by ``total``; then the goal that ``what`` on the largest history costs at most
    GOAL_INCREMENTAL_GROWTH times what it costs on the smallest. Returns the totals by history."""
    inc = short(increment)
    totals = {}
    for h in histories:
        stages = [results.stage(f"[{short(h)}] +{inc} {x}") for x in parts]
        if all(stages):
            stage = Stage(f"[{short(h)}] +{inc} {total}", sum(p.seconds for p in stages), increment)
            stage.peak_mb = max(p.peak_mb for p in stages)
            results.stages.append(stage)
            totals[h] = stage
    if len(totals) >= 2:
        small, large = totals[min(totals)], totals[max(totals)]
        ratio = large.seconds / small.seconds
        results.goals.append(
            (
                f"{what} +{inc} on {short(max(totals))} "
                f"<= {GOAL_INCREMENTAL_GROWTH}x on {short(min(totals))}",
                f"{ratio:.2f}x ({large.seconds:.1f}s / {small.seconds:.1f}s)",
                ratio <= GOAL_INCREMENTAL_GROWTH,
            )
        )
    return totals


def _mirrors(results: Results, histories: list[int], increment: int) -> None:
    """On each history, the mirrors' increment costs no more than the state step's (their models'
    own seconds, each in its dbt run)."""
    inc = short(increment)
    for h in histories:
        tag = short(h)
        mirrored, state = (
            results.stage(f"[{tag}] +{inc} {MIRROR_STAGE}"),
            results.stage(f"[{tag}] +{inc} {STATE_MODELS_STAGE}"),
        )
        if mirrored and state:
            seconds = mirrored.model_seconds if mirrored.model_seconds is not None else mirrored.seconds
            ratio = seconds / state.seconds
            results.goals.append(
                (
                    f"mirrors' +{inc} on {tag} <= the state step's ({', '.join(STATE_MODELS)}), models",
                    f"{ratio:.2f}x ({seconds:.1f}s / {state.seconds:.1f}s)",
                    seconds <= state.seconds,
                )
            )


def _marts_against_peer(results: Results, main_tag: str) -> None:
    """Each mart (sequin_events, the state step), its models' seconds in the marts' run, against the
    PySpark peer's step doing its work."""
    _, _, seq, cons = _marts(results, main_tag)
    peer_log, peer_state = results.stage(PEER_PYSPARK_LOG), results.stage(PEER_PYSPARK_STATE)
    for mart, peer in ((seq, peer_log), (cons, peer_state)):
        if mart and peer:
            ratio = mart.seconds / peer.seconds
            results.goals.append(
                (
                    f"{mart.name.split('] ')[1]} "
                    f"<= {GOAL_MART_VS_PEER}x peer PySpark {peer.name.split(': ')[1]}",
                    f"{ratio:.2f}x ({mart.seconds:.1f}s / {peer.seconds:.1f}s)",
                    ratio <= GOAL_MART_VS_PEER,
                )
            )


def _floor(results: Results, main_tag: str, e2e: Stage | None) -> None:
    """(info) The floor on the history against the raw parse, the ingestion and the end to end."""
    floor_append, floor_dbt = results.stage(f"[floor] {FLOOR_APPEND}"), results.stage(f"[floor] {FLOOR_DBT}")
    parse, ingest = results.stage(RAW_PARSE), results.stage(f"[{main_tag}] ingest")
    if floor_append and parse:
        results.goals.append(
            (
                "(info) the floor's parse + Delta append vs raw parse",
                f"{floor_append.seconds / parse.seconds:.2f}x",
                True,
            )
        )
    if floor_append and ingest:
        results.goals.append(
            (
                "(info) ingest vs the floor's parse + Delta append",
                f"{ingest.seconds / floor_append.seconds:.2f}x",
                True,
            )
        )
    if floor_append and floor_dbt and e2e and parse:
        floor_total = floor_append.seconds + floor_dbt.seconds
        results.goals.append(
            (
                "(info) end to end vs the floor's (append + one dbt run)",
                f"{e2e.seconds / floor_total:.2f}x ({floor_total:.1f}s, "
                f"{floor_total / parse.seconds:.2f}x raw parse)",
                True,
            )
        )


def _floor_increment(results: Results, main_tag: str, increment: int, incs: dict[int, Stage]) -> None:
    """The floor's incremental total (a stage) and, (info), the main history's increment against it."""
    inc = short(increment)
    floor_inc = [results.stage(f"[floor] +{inc} {x}") for x in (FLOOR_APPEND, FLOOR_DBT)]
    if not all(floor_inc):
        return
    floor_total = sum(p.seconds for p in floor_inc)
    results.stages.append(Stage(f"[floor] +{inc} total", floor_total, increment))
    main_inc = next((total for h, total in incs.items() if short(h) == main_tag), None)
    if main_inc:
        results.goals.append(
            (
                f"(info) +{inc} on {main_tag} vs the floor's +{inc}",
                f"{main_inc.seconds / floor_total:.2f}x ({main_inc.seconds:.1f}s / {floor_total:.1f}s)",
                True,
            )
        )


def _scheduled(results: Results, main_tag: str, histories: list[int], increment: int) -> None:
    """What a user schedules. With nothing new at the main size: one ingestion and one dbt run of
    the marts, then the plain build, each against the floor's increment. Each history's second
    increment as one ingestion and one plain build (a stage), flat from the smallest history to the
    largest."""
    inc = short(increment)
    floor_total = results.stage(f"[floor] +{inc} total")
    for what, bar in (
        (MARTS_STAGE, GOAL_NOTHING_NEW_VS_FLOOR),
        (PLAIN_BUILD_STAGE, GOAL_PLAIN_BUILD_VS_FLOOR),
    ):
        idle = results.stage(f"[{main_tag}] nothing new: {what}")
        if idle and floor_total:
            ratio = idle.seconds / floor_total.seconds
            results.goals.append(
                (
                    f"nothing new: {what} on {main_tag} <= {bar}x the floor's +{inc}",
                    f"{ratio:.2f}x ({idle.seconds:.1f}s / {floor_total.seconds:.1f}s)",
                    ratio <= bar,
                )
            )
    _flat_in_history(
        results,
        histories,
        increment,
        ("then ingest", f"then {PLAIN_BUILD_STAGE}"),
        "then ingest + plain build",
        "ingest + plain build's",
    )


def _whole_peer(results: Results, main_tag: str) -> None:
    """(info) wal_lake's log and whole pipeline against the PySpark peer's, both from files."""
    ingest, marts, seq, _ = _marts(results, main_tag)
    peer_log, peer_state = results.stage(PEER_PYSPARK_LOG), results.stage(PEER_PYSPARK_STATE)
    if ingest and seq and peer_log:
        ratio = (ingest.seconds + seq.seconds) / peer_log.seconds
        results.goals.append(
            ("(info) ingest + sequin_events vs peer PySpark log (both from files)", f"{ratio:.2f}x", True)
        )
    if ingest and marts and peer_log and peer_state:
        ratio = (ingest.seconds + marts.seconds) / (peer_log.seconds + peer_state.seconds)
        results.goals.append(("(info) wal_lake end to end vs whole peer PySpark job", f"{ratio:.2f}x", True))
