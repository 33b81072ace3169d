"""The raw schema's default is written once for Python (``python_jobs.ingest.ledger.DEFAULT_SCHEMA``,
which the ingestion job, the mirrors' writer, the cluster helpers, the demo and the harness import)
and once for dbt, which cannot import it (the sources' ``env_var`` default): the two must agree."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from python_jobs.ingest.ledger import DEFAULT_SCHEMA

SOURCES = Path(__file__).resolve().parents[2] / "models" / "staging" / "_wal__sources.yml"


def test_dbt_sources_default_to_the_ingestion_jobs_raw_schema():
    (source,) = yaml.safe_load(SOURCES.read_text())["sources"]
    found = re.fullmatch(r"\{\{ env_var\('WAL_LAKE_RAW_SCHEMA', '([^']+)'\) \}\}", source["schema"])
    assert found, f"{SOURCES.name}: the source's schema is not env_var('WAL_LAKE_RAW_SCHEMA', default)"
    assert found.group(1) == DEFAULT_SCHEMA
