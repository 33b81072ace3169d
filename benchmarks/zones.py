"""The landing zones a run measures: one seeded wal2json zone per history, its increment held back.

Each history's zone (benchmarks/generate.py) is generated into the scratch directory with the same
knobs (``--wide``, ``--key-move-ratio``, ...), the held-back increment ``--increment`` changes on
top, twice. What each zone holds is recorded in the results (``generated``, by size) for the report and
the checks, and the knobs are described in words (``variant``) for the report's header.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from benchmarks import generate as gen
from benchmarks.bench import Bench
from benchmarks.results import short

# What a zone's figures are, as the results keep them (besides its files, copies and bytes).
ZONE_COUNTS = (
    "changes",
    "lines",
    "transactions",
    "inserts",
    "updates",
    "deletes",
    "omitted",
    "key_moves",
    "replayed_lines",
    "live_before_increment",
    "live",
)


def generate_zones(bench: Bench, histories: list[int]) -> dict[int, gen.Zone]:
    """A zone per history, by size; the results get each zone's figures, the knobs and the variant."""
    args, results = bench.args, bench.results
    zones = {}
    for h in histories:
        # Two increments: the first measured stage by stage, the second as a user schedules it.
        knobs = gen.knobs_from(args, h, holdback=args.increment, increments=2)
        bench.log(f"generating {short(h)} + 2 x {short(args.increment)} changes")
        zone = gen.generate(bench.scratch / f"zone_{short(h)}", knobs, progress=h >= 1_000_000)
        bench.log(
            f"generated {zone.changes:,} changes, {zone.lines:,} lines, {len(zone.files)} files + "
            f"{len(zone.copies)} copies in {zone.seconds:.1f}s "
            f"({zone.changes / zone.seconds:,.0f} changes/s); {zone.key_moves:,} key moves"
        )
        results.generated[short(h)] = zone_figures(zone)
        zones[h] = zone
    results.knobs = asdict(knobs) | {"changes": args.changes}
    results.variant = variant(knobs)
    print(f"variant: {results.variant}")
    return zones


def zone_figures(zone: gen.Zone) -> dict:
    """What the zone holds: its counts, files, copies, and bytes (landed files and the increments)."""
    return {k: getattr(zone, k) for k in ZONE_COUNTS} | {
        "files": len(zone.files),
        "copies": len(zone.copies),
        "bytes": sum(Path(p).stat().st_size for p in zone.landed_files() + sum(zone.increments, [])),
    }


def variant(knobs: gen.Knobs) -> str:
    """What the zones hold, in words, for the report."""
    columns = gen.WIDE_COLUMNS if knobs.wide else gen.COLUMNS
    shape = "wide" if knobs.wide else "narrow"
    return (
        f"{shape}: {len(columns)} columns, TOAST-able doc of {knobs.doc_bytes} B; key moves in "
        f"{knobs.key_move_ratio:.1%} of updates; deletes {knobs.delete_ratio:.0%} of live-key touches, "
        f"doc left out of {knobs.omitted_ratio:.0%} of updates, {knobs.replay_ratio:.0%} of files copied"
    )
