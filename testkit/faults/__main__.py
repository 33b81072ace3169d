"""The command line: ``python -m testkit.faults step`` (one pipeline run, the process that is
killed) and ``python -m testkit.faults inject`` (a whole fault injection, as scripts/faults.sh runs
it, with the reference on a Spark session of this process)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import testkit.faults
from python_jobs.spark_session import PROJECT_DIR
from testkit.faults.injection import inject
from testkit.faults.pipeline import step


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.faults", description=testkit.faults.__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("step", help="one pipeline run: land, run the models (the process that is killed)")
    st.add_argument("--landing", type=Path, required=True)
    st.add_argument("--dump", type=Path)
    st.add_argument("--max-files-per-batch", type=int, default=3, help="0: all new files in one batch")
    st.add_argument("--serve", type=Path, help="after the run, wait for requests in this folder to run again")
    inj = sub.add_parser("inject", help="kill, rerun and compare with an undisturbed run")
    inj.add_argument("--workdir", type=Path, required=True, help="scratch directory (emptied first)")
    inj.add_argument("--kills", type=int, default=6)
    inj.add_argument("--seed", type=int, default=1)
    inj.add_argument("--transactions", type=int, default=200)
    inj.add_argument("--max-files-per-batch", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "step":
        return step(args.landing, args.dump, args.max_files_per_batch, args.serve)
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    args.workdir.mkdir(parents=True)
    # The reference's session: its warehouse and metastore in the work directory, not the project's.
    os.environ["WAL_LAKE_SPARK_DIR"] = str(args.workdir.resolve() / "reference" / "spark")
    os.chdir(PROJECT_DIR)
    from python_jobs.spark_session import get_spark

    spark = get_spark("wal_lake_faults_reference")
    try:
        report = inject(
            spark, args.workdir, args.kills, args.seed, args.transactions, args.max_files_per_batch
        )
    finally:
        spark.stop()
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
