"""``python -m python_jobs.ingest``: the command line of the ingestion job (options, exit status)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from python_jobs.ingest.errors import IngestError
from python_jobs.ingest.job import run
from python_jobs.ingest.landing import LandingError
from python_jobs.ingest.ledger import DEFAULT_SCHEMA
from python_jobs.ingest.plan import DEFAULT_MAX_BATCH_BYTES, FORMAT_AUTO, FORMATS
from python_jobs.ingest.table_keys import TableKeysError, load


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def _size(text: str) -> int:
    """'512m' -> bytes; a plain number is bytes; 0 means no limit."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    t = text.strip().lower().removesuffix("b")
    factor = units.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in units else t
    try:
        value = int(number) * factor
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (e.g. 512m, 2g, 1048576; from --max-batch-size or WAL_LAKE_MAX_BATCH_SIZE)"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ
    parser = argparse.ArgumentParser(
        prog="python -m python_jobs.ingest",
        description=(
            "Land new CDC files (wal2json format-version 2 or Debezium JSON Lines, optionally .gz) from a "
            "landing zone (one folder per source_id) as the Delta tables wal_events and wal_rejects, and "
            "the view wal_frontier. Exactly once per file and safe to kill at any point: rerun to finish."
        ),
        epilog="An option's environment variable applies when the option is not given. "
        "See docs/ingestion.md.",
    )
    parser.add_argument(
        "--landing",
        metavar="PATH",
        default=env.get("WAL_LAKE_LANDING"),
        required="WAL_LAKE_LANDING" not in env,
        help="root of the landing zone, any path Spark reads (env WAL_LAKE_LANDING)",
    )
    parser.add_argument(
        "--source",
        metavar="ID",
        action="append",
        dest="sources",
        help="a source_id (a folder of the landing zone) to ingest; repeatable; default: every folder",
    )
    parser.add_argument(
        "--format",
        metavar="{auto,wal2json,debezium}",
        default=env.get("WAL_LAKE_INGEST_FORMAT", FORMAT_AUTO),
        help="input format; auto detects it per file from its first parsable line "
        "(choices: auto, wal2json, debezium; env WAL_LAKE_INGEST_FORMAT; default auto)",
    )
    parser.add_argument(
        "--target-schema",
        metavar="NAME",
        default=env.get("WAL_LAKE_RAW_SCHEMA", DEFAULT_SCHEMA),
        help=f"schema of the landed tables (env WAL_LAKE_RAW_SCHEMA; default {DEFAULT_SCHEMA})",
    )
    _add_batch_options(parser, env)
    parser.add_argument(
        "--table-keys",
        metavar="FILE",
        default=None,  # table_keys.load reads the environment: so does the job when called as a library
        help="the table registry: key columns of tables whose Debezium lines carry no Kafka key "
        "(env WAL_LAKE_TABLE_KEYS; default: the project's seeds/table_keys.csv)",
    )
    return parser.parse_args(argv)


def _add_batch_options(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    parser.add_argument(
        "--max-files-per-batch",
        metavar="N",
        type=_positive_int,
        default=_positive_int(env["WAL_LAKE_MAX_FILES_PER_BATCH"])
        if env.get("WAL_LAKE_MAX_FILES_PER_BATCH")
        else None,
        help="land at most N new files per batch "
        "(env WAL_LAKE_MAX_FILES_PER_BATCH; default: no limit on the count)",
    )
    parser.add_argument(
        "--max-batch-size",
        metavar="SIZE",
        type=_size,
        default=env.get("WAL_LAKE_MAX_BATCH_SIZE", f"{DEFAULT_MAX_BATCH_BYTES // 2**20}m"),  # parsed by type=
        help="land at most SIZE of new files per batch, at least one file; a number of bytes with an "
        "optional k, m or g suffix, 0 for no limit (env WAL_LAKE_MAX_BATCH_SIZE; "
        f"default {DEFAULT_MAX_BATCH_BYTES // 2**20}m)",
    )


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = next((line for line in lines if not line.startswith("An error occurred while calling")), None)
    return (text or type(exc).__name__)[:400]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.format not in FORMATS:
        print(
            f"ingest: error: unknown format '{args.format}' (choose from {', '.join(FORMATS)})",
            file=sys.stderr,
        )
        return 2
    try:
        load(args.table_keys)  # a misconfigured registry fails before Spark starts
    except TableKeysError as exc:
        print(f"ingest: error: {exc}", file=sys.stderr)
        return 2
    from python_jobs.spark_session import SparkSetupError, get_spark

    try:
        spark = get_spark("wal_lake_ingest")
    except SparkSetupError as exc:
        print(f"ingest: error: {exc}", file=sys.stderr)
        return 2
    try:
        summary = run(
            spark,
            landing=args.landing,
            sources=args.sources,
            source_format=args.format,
            schema=args.target_schema,
            max_files_per_batch=args.max_files_per_batch,
            max_bytes_per_batch=args.max_batch_size or None,
            table_keys_file=args.table_keys,
        )
    except (LandingError, IngestError) as exc:
        print(f"ingest: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, LandingError) else 1
    except Exception as exc:  # Spark and Delta failures: one line here, the details in Spark's log
        print(
            f"ingest: error: {_one_line(exc)} (rerun to resume: nothing is lost or doubled)", file=sys.stderr
        )
        return 1
    print(summary.line(), flush=True)
    return 0 if summary.balanced else 1
