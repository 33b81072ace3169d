"""wal_lake's product, what a user runs: the ingestion job (``ingest``), live capture (``capture``),
the typed mirrors' model writer (``mirrors``), the cluster target's helpers (``cluster``), the Spark
session (``spark_session``), LSN text (``lsn``) and ``make demo`` (``demo``)."""
