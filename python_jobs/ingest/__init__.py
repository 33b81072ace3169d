"""The ingestion job: lands a zone of CDC JSON Lines files as the raw Delta tables.

Run it as ``python -m python_jobs.ingest --help``. Each format (wal2json, Debezium) is a pure
``transform(lines) -> ChangeSet`` in its own module; ``job`` is the thin shell around them.
"""
