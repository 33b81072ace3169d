"""The fault plan: where each run is killed, and how sample files reach a landing zone.

A kill point is counted in files written under the warehouse since the run started
(``files:N``: before, inside or after any Delta write of the ingestion job or of a dbt MERGE), in
seconds (``seconds:S``: during start-up and reading), or is ``mid-merge:<table>`` (a model's new
data files exist and its Delta commit does not yet). The kills are spread over the rounds from a
seeded generator; the first kill of every round after the first is mid-merge. A writer delivers a
file under a hidden name and renames it in, as every writer of a landing zone must.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Kill:
    round: int
    point: str  # "files:N", "seconds:S" or "mid-merge:<table>"
    at: str = ""  # what was last written when the process died
    happened: bool = False


def deliver(sample: Path, landing: Path, files: list[tuple[str, str]], prefix: str = "") -> int:
    """Copy sample files into a landing zone the way a writer must: under a hidden name, then renamed
    in. Returns the number of lines delivered."""
    lines = 0
    for source, name in files:
        target_dir = landing / source / prefix if prefix else landing / source
        target_dir.mkdir(parents=True, exist_ok=True)
        tmp = target_dir / f".{name}.part"
        shutil.copyfile(sample / source / name, tmp)
        tmp.rename(target_dir / name)
        lines += sum(1 for _ in (sample / source / name).open("rb"))
    return lines


def plan_kills(rng: random.Random, rounds: int, kills: int, files_per_round: list[int]) -> list[Kill]:
    """Spread the kills over the rounds; the first of round 2 is mid-merge of a model, others random."""
    plan = []
    for i in range(kills):
        rnd = 1 + (i * rounds) // kills if kills >= rounds else rounds - i
        first_of_round = not any(k.round == rnd for k in plan)
        roll = rng.random()
        if rnd > 1 and first_of_round:
            point = f"mid-merge:{rng.choice(['sequin_events', 'source_records', 'consumer_records'])}"
        elif roll < 0.15:
            point = f"seconds:{rng.uniform(1.0, 10.0):.1f}"
        else:
            # A kill run resumes where the last one died, so aim within the first half of a full run.
            point = f"files:{rng.randint(1, max(1, files_per_round[rnd - 1] // 2))}"
        plan.append(Kill(rnd, point))
    return plan
