"""The ingestion job: lands a zone of CDC JSON Lines files as the raw Delta tables.

Run it as ``python -m python_jobs.ingest --help`` (``cli``). Each format is a pure
``transform(lines) -> ChangeSet`` (``wal2json``; ``debezium``, which parses with ``debezium_envelope``);
``job`` is the thin shell around them: plan, extract, transform, load. docs/ingestion.md maps the rest.
"""
