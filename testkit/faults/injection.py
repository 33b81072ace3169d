"""The fault injection's course: a sample, the reference's rounds, then the faulted rounds.

``inject`` builds a seeded sample landing zone and delivers it in two halves (round 2 is an
incremental MERGE). The reference runs each round once and checks itself against the sample's
expected state. The faulted warehouse then takes each round with its planned kills, and a complete
run is compared with the reference's dump. The process that completes round 1 stays and is round
2's first run (killed mid-merge). Then every landing file is delivered again under a new name and
two pipelines start at once on one warehouse: one gives way with a one-line error (the local
target's embedded metastore admits one Spark process), the other recovers round 2 and lands the
replay; its tables are checked as ``check_replay`` says.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from pathlib import Path

from testkit.faults.comparison import Report, check_replay, compare
from testkit.faults.pipeline import SCHEMA, parse_project
from testkit.faults.plan import deliver, plan_kills
from testkit.faults.runs import Reference, Warehouse


def inject(
    spark,
    workdir: Path,
    kills: int,
    seed: int,
    transactions: int = 200,
    max_files_per_batch: int = 3,
    out=sys.stdout,
) -> Report:
    """The reference on ``spark`` (``Reference``), the faulted runs in step processes of their own,
    all under ``workdir``."""
    from testkit.sample import generate

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    started = time.monotonic()
    rng = random.Random(seed)
    report = Report()
    sample = workdir / "sample"
    if sample.exists():
        shutil.rmtree(sample)
    generate(sample, seed=seed, transactions=transactions)
    manifest = json.loads((sample / "manifest.json").read_text())
    files = [(s, name) for s, info in sorted(manifest["sources"].items()) for name in info["files"]]
    # Round 1: the first half of every source's files; round 2: the rest (an incremental MERGE).
    halves: list[list[tuple[str, str]]] = [[], []]
    for source, info in sorted(manifest["sources"].items()):
        cut = len(info["files"]) // 2
        halves[0] += [(source, n) for n in info["files"][:cut]]
        halves[1] += [(source, n) for n in info["files"][cut:]]
    say(f"faults: seed {seed}, {transactions} transactions, {len(files)} files in 2 rounds; {kills} kills")

    parse_state = parse_project(workdir / "parsed")
    ref = Reference(spark, workdir / "reference", max_files_per_batch, parse_state)
    faulted = Warehouse(workdir / "faulted", max_files_per_batch, parse_state)
    expected: list[dict[str, list[str]]] = []
    files_per_round = []
    for rnd, half in enumerate(halves, 1):
        deliver(sample, ref.landing, half)
        if rnd == 2:  # what the check against the expected state reads
            shutil.copyfile(sample / "manifest.json", ref.landing / "manifest.json")
            for source in manifest["sources"].values():
                shutil.copyfile(sample / source["expected_state"], ref.landing / source["expected_state"])
        before = ref.written()
        t0 = time.monotonic()
        expected.append(ref.run(f"round{rnd}", verify=rnd == 2))
        files_per_round.append(len(ref.written() - before))
        say(
            f"  reference round {rnd}: {files_per_round[-1]} files written in the warehouse, "
            f"{time.monotonic() - t0:.0f}s"
        )
    ref.drop()
    if not expected[-1][f"{SCHEMA}.consumer_records"]:
        raise RuntimeError("the reference run built no consumer_records")

    plan = plan_kills(rng, 2, kills, files_per_round)
    report.kills = plan
    # Round 2's first kill (mid-merge of a model, or the run ending first) comes after its ingestion:
    # the replayed files can then go in before the runs at once without joining round 2's batches.
    fold_replay = any(k.round == 2 for k in plan)
    try:
        _faulted_rounds(sample, files, halves, faulted, plan, expected, fold_replay, report, say)
    finally:
        faulted.stop_server(kill=True)  # none is left unless something above failed
    say(f"{report.line()} in {time.monotonic() - started:.0f}s")
    return report


def _faulted_rounds(sample, files, halves, faulted, plan, expected, fold_replay, report, say) -> None:
    for rnd, half in enumerate(halves, 1):
        deliver(sample, faulted.landing, half)
        for kill in (k for k in plan if k.round == rnd):
            faulted.run_and_kill(kill)
            outcome = f"killed after {kill.at}" if kill.happened else "ended before the kill point"
            say(f"  round {rnd}: kill at {kill.point}: {outcome}")
        if rnd == 1:
            # The process that completes round 1 waits to be round 2's first run (to be killed).
            compare("round 1", expected[0], faulted.complete("round1", serve=fold_replay), report)
            say(f"  {report.comparisons[-1]}")
            continue
        faulted.stop_server()
        phase = "round 2"
        if fold_replay:
            # Every file again, under new names that sort after the originals: a whole landing zone
            # replayed, landed by the run that goes through below.
            report.replayed_lines = deliver(sample, faulted.landing, files, prefix="replay")
            phase = "round 2 with all files replayed"
        # Two pipelines at once on one warehouse: on the local target one must give way (the embedded
        # metastore admits one Spark process) with a one-line error; either way the next run converges.
        dumps = [faulted.root / "dump_concurrent_a.json", faulted.root / "dump_concurrent_b.json"]
        procs = [faulted.start(dumps[0]), faulted.start(dumps[1])]
        report.concurrent_exit_codes = [faulted.finish(p) for p in procs]
        for rc, proc in zip(report.concurrent_exit_codes, procs, strict=True):
            if rc != 0:
                report.concurrent_errors.append(_last_error(Path(proc.log.name)))  # type: ignore[attr-defined]
        say(
            f"  round 2: two pipelines started at once: exit codes {report.concurrent_exit_codes}"
            + "".join(f"; {e}" for e in report.concurrent_errors)
        )
        winners = [d for d, rc in zip(dumps, report.concurrent_exit_codes, strict=True) if rc == 0]
        if winners:  # the run that went through is round 2's result; no extra run needed
            phase += " (two runs at once)"
            found = json.loads(winners[0].read_text())
        else:
            found = faulted.complete("round2")
        if fold_replay:
            check_replay(phase, expected[1], found, report)
            for line in report.comparisons[-2:]:
                say(f"  {line}")
        else:
            compare(phase, expected[1], found, report)
            say(f"  {report.comparisons[-1]}")
            report.replayed_lines = deliver(sample, faulted.landing, files, prefix="replay")
            check_replay("all files replayed", expected[1], faulted.complete("replayed"), report)
            for line in report.comparisons[-2:]:
                say(f"  {line}")


def _last_error(log: Path) -> str:
    lines = [line for line in log.read_text().splitlines() if "error" in line.lower()]
    return lines[-1].strip()[:300] if lines else "(no error line in the log)"
