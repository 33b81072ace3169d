"""What a benchmark run measured: its stages, checks and goals, and the names the stages go by.

A ``Stage`` is one timed step: its seconds, the changes it handled, the driver's peak memory and,
for a dbt run, the models' own execution time. ``Results`` is everything one run reports (written
as JSON with ``--json``). A stage is found by its name, so the stage modules and the goals share
the names below; a history's stages are prefixed ``[<size>]`` (``short``), the floor's ``[floor]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RAW_PARSE = "raw parse (read.text + from_json + count)"
# The state step, against the peer's: the one fold (source_records) and its projection onto the
# consumers (consumer_records).
STATE_MODELS = ("source_records", "consumer_records")
# The typed mirrors on top of source_records, in one dbt invocation: the column registry they read,
# one model per table, their catalog and their rejects (the mirror models are written by
# python_jobs.mirrors before the first run).
MIRROR_MODELS = ("column_registry", "tag:mirror", "mirror_tables", "mirror_rejects")
MIRROR_STAGE = "dbt run mirrors"
# What a user schedules: one ingestion, then one dbt invocation. The marts alone (sequin_events and
# the state step, one `dbt run`), or the plain build the README names for a scheduled run: every
# seed, model, the snapshot and the data tests but the history's (selectors.yml: those run daily);
# the unit tests belong in CI.
MARTS = ("sequin_events", *STATE_MODELS)
MARTS_STAGE = "ingest + one dbt run of the marts"
# wal_lake's pipeline as a user schedules it, on a history and on each increment: the ingestion job,
# then one `dbt run` of the marts (on a history's first run with the touches view they read, which
# needs sequin_events). What each mart took in that run is derived from its nodes' execution times:
# the stages after it, compared with the peers' steps and the mirrors.
MARTS_RUN_STAGE = "dbt run of the marts"
SEQ_MODEL_STAGE = "sequin_events (its model in the marts' run)"
STATE_MODELS_STAGE = "state step (its models in the marts' run)"
PLAIN_BUILD = ("build", "--selector", "scheduled")
PLAIN_BUILD_STAGE = "plain dbt build"  # dbt build --selector scheduled
# The stack's floor (benchmarks/floor_project): a parse and Delta append of the same files, then the
# two trivial incremental models in one dbt run.
FLOOR_APPEND = "parse + Delta append"
FLOOR_DBT = "dbt run floor_log floor_state"
# A peer's two steps, after "peer <name>: ".
PEER_LOG = "log (parse, dedup, seq)"
PEER_STATE = "state (flatten)"


@dataclass
class Stage:
    name: str
    seconds: float
    changes: int
    peak_mb: float = 0.0
    model_seconds: float | None = None  # dbt's execution_time of the model, without dbt's own start-up
    note: str = ""

    @property
    def rate(self) -> float:
        return self.changes / self.seconds if self.seconds else 0.0


@dataclass
class Results:
    command: str
    changes: int
    increment: int
    knobs: dict
    stages: list[Stage] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    goals: list[tuple[str, str, bool]] = field(default_factory=list)
    generated: dict = field(default_factory=dict)
    variant: str = ""

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)


def short(n: int) -> str:
    """A size as the stage names write it: 10k, 1M, or the number itself."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n:,}"
