"""wal_lake's PySpark jobs: ingestion of landed WAL changes, capture, sample data."""
