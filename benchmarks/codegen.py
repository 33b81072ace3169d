"""How much code Spark generates and compiles for each step, and whether it compiles it again.

    .venv/bin/python -m benchmarks.codegen --changes 200000 [--huge-method-limit 8000]

Two suspects behind ingestion's and the models' constant factors, measured without changing them:

- **Recompiles.** Spark caches generated code by its source text. A value inlined as a literal (a
  batch id, a timestamp, a model's seq bounds) makes the source differ from one batch or run to the
  next, so the same plan is compiled again. For each step this prints how many classes Janino
  compiled and the milliseconds it spent (Spark's own ``CodegenMetrics``). A step whose plans were
  all compiled before, by a step of the same shape, compiles nothing when nothing is inlined.
- **Huge methods.** The JVM does not JIT-compile a method over 8,000 bytes of bytecode; Spark falls
  back from whole-stage code generation only above ``spark.sql.codegen.hugeMethodLimit`` (65,535),
  so a stage between the two runs interpreted without a word. With ``--huge-method-limit 8000``
  every whole-stage method over 8,000 bytes is reported (and falls back, which is what the A/B of
  the timings needs): its size and the plan's first operators.

The steps: a small warm-up ingestion (cold JVM, another schema), the history's ingestion and
``sequin_events`` on it, the held-back increment's ingestion and ``sequin_events`` on it, and
``sequin_events`` once more with nothing new. The
compile counts and the sizes do not depend on the machine's load; the seconds do. Nothing is written
into the repository.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks import PROJECT_DIR, use_scratch
from benchmarks import generate as gen

HUGE = re.compile(r"the bytecode size \((\d+)\) is above the limit (\d+)")
COMPILED = re.compile(r"Code generated in ([0-9.]+) ms")
LOGGERS = (
    "org.apache.spark.sql.execution.WholeStageCodegenExec",
    "org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator",
)


def _metrics(spark):
    return spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics


def classes_compiled(spark) -> int:
    """Classes Janino has compiled so far (a cache hit compiles none)."""
    return _metrics(spark).METRIC_COMPILATION_TIME().getCount()


@contextmanager
def _stderr_to(path: Path):
    """Send this process's stderr, and so the JVM's (started after, it inherits the descriptor), to
    ``path``: Spark logs there. Restored, and the file's tail shown, when the block raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as sink:
        os.dup2(sink.fileno(), 2)
    try:
        yield
    except BaseException:
        os.dup2(saved, 2)
        sys.stderr.write("".join(path.read_text(errors="replace").splitlines(True)[-40:]))
        raise
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _huge_methods(log: str) -> list[tuple[int, str]]:
    """(bytecode size, the plan's first line) of each stage that fell back for a huge method."""
    found = []
    lines = log.splitlines()
    for i, line in enumerate(lines):
        match = HUGE.search(line)
        if match:
            plan = next((p.strip() for p in lines[i + 1 : i + 4] if p.strip().startswith("*")), "")
            found.append((int(match.group(1)), plan[:90]))
    return found


def measure(spark, log: Path, label: str, fn) -> dict:
    count0, offset = classes_compiled(spark), log.stat().st_size
    started = time.monotonic()
    fn()
    seconds = time.monotonic() - started
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    huge = _huge_methods(text)
    compile_ms = sum(float(ms) for ms in COMPILED.findall(text))
    compiled = classes_compiled(spark) - count0
    row = {"step": label, "seconds": seconds, "compiled": compiled, "compile_ms": compile_ms}
    row["huge"] = huge
    print(
        f"{label:<34} {seconds:>7.1f} s  {row['compiled']:>5} classes compiled"
        f" in {row['compile_ms'] / 1000:>6.1f} s  {len(huge)} stage(s) over the limit",
        flush=True,
    )
    for size, plan in sorted(huge, reverse=True)[:8]:
        print(f"    {size:>6} bytes  {plan}")
    return row


def _dbt(*args: str) -> None:
    from dbt.cli.main import dbtRunner

    result = dbtRunner().invoke(
        [*args, "--quiet", "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR)]
    )
    if not result.success:
        raise RuntimeError(f"dbt {' '.join(args)} failed: {result.exception}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.codegen", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--changes", type=int, default=200_000, help="the history's changes (default 200,000)"
    )
    parser.add_argument("--increment", type=int, default=10_000, help="the held-back increment's changes")
    parser.add_argument(
        "--huge-method-limit",
        type=int,
        default=None,
        help="set spark.sql.codegen.hugeMethodLimit (8000 reports every method the JIT would skip)",
    )
    parser.add_argument("--ingest-only", action="store_true", help="leave the models out")
    gen.add_knob_args(parser)
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="wal_lake_codegen_"))
    use_scratch(scratch, "codegen")
    log = scratch / "spark.log"
    try:
        zone = gen.generate(
            scratch / "zone", gen.knobs_from(args, args.changes, args.increment), progress=False
        )
        warm = gen.generate(scratch / "warm", gen.Knobs(changes=5_000, keys=1_000), progress=False)
        with _stderr_to(log):
            rows = run_steps(args, zone, warm, log)
        total, huge = sum(r["compiled"] for r in rows), sum(len(r["huge"]) for r in rows)
        print(f"codegen: {total:,} classes compiled over {len(rows)} steps; {huge} stage(s) over the limit")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def run_steps(args: argparse.Namespace, zone: gen.Zone, warm: gen.Zone, log: Path) -> list[dict]:
    from python_jobs.ingest import job as ingest
    from python_jobs.spark_session import get_spark

    spark = get_spark("wal_lake_codegen")
    jvm = spark.sparkContext._jvm
    for name in LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            name, jvm.org.apache.logging.log4j.Level.INFO
        )
    if args.huge_method_limit:
        spark.conf.set("spark.sql.codegen.hugeMethodLimit", str(args.huge_method_limit))
    print(f"spark.sql.codegen.hugeMethodLimit = {spark.conf.get('spark.sql.codegen.hugeMethodLimit')}")
    quiet = open(os.devnull, "w")
    models = not args.ingest_only

    def ingest_zone(root: Path, schema: str):
        return lambda: ingest.run(spark, root, schema=schema, out=quiet)

    def sequin_events():
        _dbt("run", "-s", "sequin_events")

    rows = [measure(spark, log, "ingest warm-up (5k, cold JVM)", ingest_zone(warm.root, "codegen_warm"))]
    rows.append(
        measure(spark, log, f"ingest history ({args.changes:,})", ingest_zone(zone.root, "codegen_raw"))
    )
    if models:
        _dbt("seed")
        _dbt("run", "-s", "staging", "intermediate", "--exclude", "int_record_touches")
        rows.append(measure(spark, log, "sequin_events on the history", sequin_events))
    gen.release_increment(zone)
    rows.append(
        measure(spark, log, f"ingest increment ({args.increment:,})", ingest_zone(zone.root, "codegen_raw"))
    )
    if models:
        rows.append(measure(spark, log, "sequin_events on the increment", sequin_events))
        rows.append(measure(spark, log, "sequin_events, nothing new", sequin_events))
    return rows


if __name__ == "__main__":
    sys.exit(main())
