"""A warehouse's consumer_records against the expected state the sample wrote for each source."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from testkit import oracle
from testkit.sample.model import SCHEMA, TABLES

TYPES: oracle.Types = {f"{SCHEMA}.{t}": dict(columns) for t, (columns, _) in TABLES.items()}
KEYS: oracle.Keys = {f"{SCHEMA}.{t}": key for t, (_, key) in TABLES.items()}


def compare_with_expected(
    landing: Path, state_of: Callable[[str], oracle.State]
) -> Iterator[tuple[str, int, list[str]]]:
    """Per source of the sample at ``landing``, in name order: its id, its expected row count, and
    where ``state_of(source_id)`` (consumer_records as ``{"schema.table": [row dicts]}``) differs
    from the expected state, value by value (``oracle.compare_states``)."""
    manifest = json.loads((landing / "manifest.json").read_text())
    for source_id, info in sorted(manifest["sources"].items()):
        expected = json.loads((landing / info["expected_state"]).read_text())
        rows = sum(len(v) for v in expected.values())
        yield source_id, rows, oracle.compare_states(expected, state_of(source_id), TYPES, KEYS)


def compare_mirrors_with_expected(
    landing: Path, mirrors_of: Callable[[str], oracle.State | None]
) -> Iterator[tuple[str, int, list[str]]]:
    """Per source of the sample (``mirrors_of(source_id)``: each table's mirror rows as
    ``{"schema.table": [row dicts of the source's columns, as Spark returns them]}``, None when the
    source has none): its id, its expected row count, and where the mirrors differ from the expected
    state, each side typed by the column's Postgres type (``oracle.compare_mirror``). Both formats
    send column types, so a source without mirrors is a difference."""
    manifest = json.loads((landing / "manifest.json").read_text())
    for source_id, info in sorted(manifest["sources"].items()):
        expected = json.loads((landing / info["expected_state"]).read_text())
        found = mirrors_of(source_id)
        if found is None:
            yield source_id, sum(len(v) for v in expected.values()), ["no typed mirrors"]
            continue
        problems = []
        for table in sorted(set(expected) | set(found)):
            problems += oracle.compare_mirror(
                table, KEYS[table], expected.get(table, []), found.get(table, []), TYPES
            )
        yield source_id, sum(len(v) for v in expected.values()), problems
