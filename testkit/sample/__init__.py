"""Seeded sample landing zone: the same shop workload as wal2json and as Debezium change events.

    python -m testkit.sample --out landing --seed 7 --transactions 80 --format both

One seeded workload (``workload.Workload``) drives an in-memory model of three tables (``model``)
and yields abstract transactions; one writer per format renders them as JSON Lines exactly as the
real tools do (``wal2json``: ``format-version=2`` as in ``tests/fixtures``; ``debezium``: Debezium
2.x Postgres events with the Kafka key beside the value). Lines are built with plain string
formatting and streamed by a ``sink`` per source to files rotated every ``--lines-per-file`` lines,
named ``%016X.jsonl`` after the first LSN they hold, so names sort in WAL order. ``generate`` wires
them and writes the manifest; ``expected`` compares a warehouse with the result.

The landing zone deliberately contains what real capture produces: several touches of one row in
one transaction ending in a delete, a delete then a re-insert, a primary-key change, a truncate
followed by inserts, updates that leave a TOASTed column out, a transaction split across two files,
a replay of the last transactions of a file at the start of the next one, a verbatim copy of a file
under a later-sorting name, and a few malformed lines. ``manifest.json`` counts all of it (its
fields: ``generate``), and each source folder holds ``_expected.json``: the tables' final rows as
Postgres's ``to_jsonb`` renders them (the form of the fixture's ``accounts.expected.json``), which
``consumer_records`` must equal. Its leading underscore hides it from the ingestion job (and from
Spark), which land every other file of a source folder.
"""

from testkit.sample.cli import main
from testkit.sample.debezium import DBZ_UNAVAILABLE, DEBEZIUM
from testkit.sample.expected import compare_mirrors_with_expected, compare_with_expected
from testkit.sample.generate import EXPECTED_STATE, SAMPLE_VERSION, generate
from testkit.sample.model import NUMERIC, SCHEMA, TABLES, TIMESTAMPTZ
from testkit.sample.wal2json import WAL2JSON

__all__ = [
    "DBZ_UNAVAILABLE",
    "DEBEZIUM",
    "EXPECTED_STATE",
    "NUMERIC",
    "SAMPLE_VERSION",
    "SCHEMA",
    "TABLES",
    "TIMESTAMPTZ",
    "WAL2JSON",
    "compare_mirrors_with_expected",
    "compare_with_expected",
    "generate",
    "main",
]
