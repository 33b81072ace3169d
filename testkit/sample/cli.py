"""``python -m testkit.sample``: write a sample landing zone."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from testkit.sample.debezium import DEBEZIUM
from testkit.sample.generate import generate
from testkit.sample.wal2json import WAL2JSON


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.sample",
        description="Seeded sample landing zone: one shop workload as wal2json and as Debezium events.",
    )
    parser.add_argument("--out", type=Path, required=True, help="landing zone root (one folder per source)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--transactions", type=int, default=80, help="transactions to generate (>= 20)")
    parser.add_argument("--format", choices=[WAL2JSON, DEBEZIUM, "both"], default="both")
    parser.add_argument(
        "--lines-per-file",
        type=int,
        default=None,
        help="rotate files after this many lines (default: 100 for small runs, up to 200,000 for large)",
    )
    parser.add_argument("--gzip", action="store_true", help="write .jsonl.gz files")
    parser.add_argument("--source-prefix", default="shop", help="source folders are PREFIX_wal2json, ...")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    manifest = generate(
        args.out,
        seed=args.seed,
        transactions=args.transactions,
        formats=(WAL2JSON, DEBEZIUM) if args.format == "both" else (args.format,),
        lines_per_file=args.lines_per_file or max(100, min(200_000, args.transactions * 3 // 4)),
        compress=args.gzip,
        source_prefix=args.source_prefix,
        progress=args.transactions >= 200_000,
    )
    parts = [
        f"{name}: {s['changes_written']:,} changes ({s['distinct_positions']:,} distinct) "
        f"in {len(s['files'])} files, {s['malformed_lines']} malformed"
        for name, s in manifest["sources"].items()
    ]
    print(f"wrote {args.out} in {time.monotonic() - started:.1f}s: " + "; ".join(parts))
    return 0
