"""Benchmarks of wal_lake against its peers (see BENCHMARKS.md): ``python -m benchmarks.run``."""
