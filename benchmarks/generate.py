"""Seeded, scalable wal2json ``format-version=2`` landing zone for the benchmarks.

``testkit.sample`` models a small shop with every anomaly once; this writes millions of
changes fast, in the same line format (``B``/``I``/``U``/``D``/``C`` records with ``xid``, ``lsn``,
``nextlsn`` on ``B``/``C``, ``timestamp``, ``schema``, ``table``, ``columns``, ``identity``, ``pk``).

Knobs: changes, tables, distinct keys, touches per transaction, delete ratio, omitted-column ratio
(an update leaves the TOASTed ``doc`` column out, as Postgres does when it did not change), key-move
ratio (that share of the updates also changes the row's key ``id`` to one not live: wal2json writes
the new key in ``columns`` and the old one in ``identity``, and ingestion lands it with
``old_record_pk``), replay ratio (that share of the files is copied whole under a name that sorts
right after the original, as a slot replay or a doubled sink delivery would) and ``wide`` (40 columns
of mixed types, about 2 KB of values per row, instead of 6). Every table has ``id bigint`` as its key.

A key that is not live is inserted; a live key is updated (and perhaps moved), or deleted with
``delete_ratio``. So the expected live state is known without Spark: ``Zone.live`` counts the live
records at the end (a moved row's old key gone, its new key live) and ``Zone.live_records`` names them.

``holdback`` changes at the end are written as separate files to ``<out>/_increment/<source>/``
(outside the landing zone: ingestion skips names starting with ``_``); ``release_increment`` moves
them in, for the incremental-cost runs. With ``increments`` above 1, as many increments of
``holdback`` changes each follow, the n-th in ``<out>/_increment_<n>/<source>/`` (released with
``release_increment(zone, n)``).

    python -m benchmarks.generate --out landing/bench --changes 1000000
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from python_jobs.lsn import format_lsn

SCHEMA = "public"
SOURCE_ID = "bench_wal2json"
INCREMENT_DIR = "_increment"
# Columns of every table: (name, wal2json type). ``doc`` is the TOAST-able one.
COLUMNS = (
    ("id", "bigint"),
    ("name", "text"),
    ("qty", "integer"),
    ("price", "numeric"),
    ("doc", "text"),
    ("updated_at", "timestamp with time zone"),
)
_PK = '"pk":[{"name":"id","type":"bigint"}]'
# The wide variant: ``id``, the TOAST-able ``doc`` and 38 columns cycling through these types, about
# 2 KB of values per row with the default ``doc``.
_WIDE_KINDS = (
    ("text", "text"),
    ("int", "integer"),
    ("num", "numeric"),
    ("ts", "timestamp with time zone"),
    ("bool", "boolean"),
)
WIDE_COLUMNS = (
    ("id", "bigint"),
    ("doc", "text"),
    *((f"c{i + 1:02d}_{_WIDE_KINDS[i % 5][0]}", _WIDE_KINDS[i % 5][1]) for i in range(38)),
)
WIDE_DOC_BYTES = 1200
_WIDE_TEXT_PAD = "y" * 44
BASE_MICROS = 1_767_225_600_000_000  # 2026-01-01 00:00:00 UTC


@dataclass
class Knobs:
    changes: int = 1_000_000
    tables: int = 4
    keys: int = 100_000
    touches_per_txn: int = 5
    delete_ratio: float = 0.1
    omitted_ratio: float = 0.3
    replay_ratio: float = 0.1
    lines_per_file: int = 100_000
    doc_bytes: int | None = None  # the TOAST-able column's length: 120, or 1200 when wide
    holdback: int = 0
    increments: int = 1  # increments of ``holdback`` changes each, held back one after the other
    seed: int = 7
    key_move_ratio: float = 0.01
    wide: bool = False

    def __post_init__(self) -> None:
        if self.doc_bytes is None:
            self.doc_bytes = WIDE_DOC_BYTES if self.wide else 120


@dataclass
class Zone:
    """What was written: counts the benchmark checks against."""

    root: str
    source_id: str
    knobs: dict
    files: list[str] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)
    increments: list[list[str]] = field(default_factory=list)  # each held-back increment's files
    lines: int = 0
    changes: int = 0  # distinct I/U/D changes, increments included
    increment_changes: int = 0  # of the first increment (each has as many)
    held_back_lines: int = 0  # the lines of every increment
    transactions: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    omitted: int = 0
    key_moves: int = 0  # updates that changed the key (counted in ``updates`` too)
    replayed_lines: int = 0
    live: int = 0  # live records after all changes (increments included)
    live_before_increment: int = 0
    live_after_increments: list[int] = field(default_factory=list)  # after the first, the second, ...
    seconds: float = 0.0
    # (table, id) of every live record at the end; left out of ``_zone.json``.
    live_records: set[tuple[str, int]] = field(default_factory=set, repr=False)

    @property
    def source_dir(self) -> Path:
        return Path(self.root) / self.source_id

    def landed_files(self) -> list[str]:
        """Every file of the landing zone right now (copies included), sorted."""
        return sorted(str(p) for p in self.source_dir.iterdir() if not p.name.startswith((".", "_")))

    @property
    def increment_files(self) -> list[str]:
        """The first increment's files (none when nothing was held back)."""
        return self.increments[0] if self.increments else []

    def history_files(self) -> list[str]:
        """The history's files and their copies, without the increments (released or not)."""
        increment = {Path(p).name for files in self.increments for p in files}
        return [f for f in self.landed_files() if Path(f).name not in increment]


_SECONDS: dict[int, str] = {}


def _timestamp(micros: int) -> str:
    seconds, frac = divmod(micros, 1_000_000)
    text = _SECONDS.get(seconds)
    if text is None:
        _SECONDS.clear()
        text = _SECONDS[seconds] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))
    return f"{text}.{frac:06d}+00"


class _Writer:
    """Rotates files between transactions; file names are the first LSN in hex (they sort in WAL order)."""

    def __init__(self, folder: Path, lines_per_file: int, zone: Zone, progress: bool):
        self.folder = folder
        self.lines_per_file = lines_per_file
        self.zone = zone
        self.progress = progress
        self.buffer: list[str] = []
        self.first_lsn: int | None = None
        self.written: list[Path] = []
        folder.mkdir(parents=True, exist_ok=True)

    def transaction(self, first_lsn: int, lines: list[str]) -> None:
        if self.first_lsn is None:
            self.first_lsn = first_lsn
        self.buffer.extend(lines)
        if len(self.buffer) >= self.lines_per_file:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        path = self.folder / f"{self.first_lsn:016X}.jsonl"
        path.write_text("\n".join(self.buffer) + "\n")
        self.zone.lines += len(self.buffer)
        self.written.append(path)
        if self.progress:
            print(
                f"  generate: {path.name} {len(self.buffer):,} lines; {self.zone.lines:,} lines so far",
                flush=True,
            )
        self.buffer = []
        self.first_lsn = None


def _wide_templates() -> tuple[str, str]:
    """``columns`` of a wide row as a %-template, with and without ``doc``: one format per line."""
    parts = []
    for name, kind in WIDE_COLUMNS:
        quoted = kind in ("text", "timestamp with time zone")
        value = '"%s"' if quoted else "%s"
        parts.append(f'{{"name":"{name}","type":"{kind}","value":{value}}}')
    full = '"columns":[' + ",".join(parts) + "]"
    return full, '"columns":[' + ",".join(p for p in parts if '"name":"doc"' not in p) + "]"


def _free_key(live: bytearray, randrange, keys: int) -> int | None:
    """A key not live in the table, or None when a few random picks found none (a full table)."""
    for _ in range(16):
        k = randrange(keys)
        if not live[k]:
            return k
    return None


def generate(out: Path, knobs: Knobs, progress: bool = True) -> Zone:
    """Write the landing zone ``out/<SOURCE_ID>/`` (and the held-back increment); return its counts."""
    started = time.monotonic()
    if knobs.keys < knobs.tables:
        raise ValueError("need at least one key per table")
    rng = random.Random(knobs.seed)
    zone = Zone(root=str(out), source_id=SOURCE_ID, knobs=asdict(knobs))
    landing = out / SOURCE_ID
    if landing.exists() and any(landing.iterdir()):
        raise FileExistsError(f"{landing} is not empty")
    keys_per_table = knobs.keys // knobs.tables
    live = [bytearray(keys_per_table) for _ in range(knobs.tables)]
    live_count = 0
    tables = [f"t{i:02d}" for i in range(knobs.tables)]
    pad = "x" * max(knobs.doc_bytes - 12, 0)
    wide_full, wide_no_doc = _wide_templates()
    history = knobs.changes
    increments = max(knobs.increments, 1) if knobs.holdback else 0
    # Where each increment starts: its index by the changes written before it.
    starts = {history + i * knobs.holdback: i for i in range(increments)}
    total = knobs.changes + increments * knobs.holdback
    writers: list[_Writer] = []
    writer = _Writer(landing, knobs.lines_per_file, zone, progress)
    lsn = 0x16_0000_0000
    xid = 1000
    micros = BASE_MICROS
    done = 0
    rand, randrange, getrandbits = rng.random, rng.randrange, rng.getrandbits
    move_ratio = knobs.key_move_ratio
    while done < total:
        # Each increment starts in a file of its own.
        if done in starts:
            writer.flush()
            if writers:
                zone.live_after_increments.append(live_count)
            else:
                zone.live_before_increment = live_count
            folder = INCREMENT_DIR + (f"_{starts[done] + 1}" if starts[done] else "")
            writer = _Writer(out / folder / SOURCE_ID, knobs.lines_per_file, zone, progress)
            writers.append(writer)
        next_start = min((s for s in starts if s > done), default=total)
        n = min(knobs.touches_per_txn, next_start - done)
        xid += 1
        micros += 1000
        first = lsn + 1
        ts = _timestamp(micros)
        head = f'"xid":{xid},"timestamp":"{ts}"'
        body = []
        for _ in range(n):
            lsn += 40 + randrange(200)
            t = randrange(knobs.tables)
            k = randrange(keys_per_table)
            table = tables[t]
            table_live = live[t]
            common = f'{{"action":"%s",{head},"lsn":"{format_lsn(lsn)}","schema":"{SCHEMA}","table":"{table}"'
            # identity: the old key, which is the key unless the update moves the row.
            ident = f'"identity":[{{"name":"id","type":"bigint","value":{k}}}]'
            omit = False
            if not table_live[k]:
                action = "I"
                table_live[k] = 1
                live_count += 1
                zone.inserts += 1
            elif rand() < knobs.delete_ratio:
                action = "D"
                table_live[k] = 0
                live_count -= 1
                zone.deletes += 1
            else:
                action = "U"
                zone.updates += 1
                omit = rand() < knobs.omitted_ratio
                zone.omitted += omit
                if move_ratio and rand() < move_ratio:
                    moved_to = _free_key(table_live, randrange, keys_per_table)
                    if moved_to is not None:
                        table_live[k] = 0
                        table_live[moved_to] = 1
                        k = moved_to
                        zone.key_moves += 1
            if action == "D":
                body.append(common % action + f",{ident},{_PK}}}")
                continue
            if knobs.wide:
                bits = getrandbits(64)
                values = [k]
                if not omit:
                    values.append(f"{xid:012d}{pad}")
                for i, (_, kind) in enumerate(WIDE_COLUMNS[2:]):
                    v = bits >> i
                    if kind == "text":
                        values.append(f"v{xid}_{k}_{i:02d}_{_WIDE_TEXT_PAD}")
                    elif kind == "integer":
                        values.append(v % 100000)
                    elif kind == "numeric":
                        values.append(f"{v % 100000}.{(v >> 7) % 100:02d}")
                    elif kind == "boolean":
                        values.append("true" if v & 1 else "false")
                    else:
                        values.append(ts)
                columns = (wide_no_doc if omit else wide_full) % tuple(values)
            else:
                cols = [
                    f'{{"name":"id","type":"bigint","value":{k}}}',
                    f'{{"name":"name","type":"text","value":"n{xid}_{k}"}}',
                    f'{{"name":"qty","type":"integer","value":{randrange(1000)}}}',
                    f'{{"name":"price","type":"numeric","value":'
                    f"{randrange(100000) // 100}.{randrange(100):02d}}}",
                ]
                if not omit:
                    cols.append(f'{{"name":"doc","type":"text","value":"{xid:012d}{pad}"}}')
                cols.append(f'{{"name":"updated_at","type":"timestamp with time zone","value":"{ts}"}}')
                columns = f'"columns":[{",".join(cols)}]'
            if action == "I":
                body.append(common % action + f",{columns},{_PK}}}")
            else:
                body.append(common % action + f",{columns},{ident},{_PK}}}")
        lsn += 48
        boundary = f'{head},"lsn":"{format_lsn(lsn)}","nextlsn":"{format_lsn(lsn + 48)}"}}'
        writer.transaction(first, ['{"action":"B",' + boundary, *body, '{"action":"C",' + boundary])
        if history <= done < history + knobs.holdback:
            zone.increment_changes += n
        done += n
        zone.transactions += 1
    writer.flush()
    if writers:
        zone.live_after_increments.append(live_count)
        zone.held_back_lines = sum(len(p.read_bytes().splitlines()) for w in writers for p in w.written)
    zone.changes = done
    zone.live = live_count
    zone.live_records = {(tables[t], k) for t in range(knobs.tables) for k, on in enumerate(live[t]) if on}
    if not knobs.holdback:
        zone.live_before_increment = live_count
    history_files = sorted(p for p in landing.iterdir())
    zone.files = [str(p) for p in history_files]
    zone.increments = [[str(p) for p in w.written] for w in writers]
    # Copies: a deterministic share of the history files, each doubled under a name sorting right after.
    # Their own random stream, so the same files are copied whatever the other knobs drew.
    n_copies = max(1, round(len(history_files) * knobs.replay_ratio)) if knobs.replay_ratio else 0
    copies = random.Random(knobs.seed).sample(history_files, n_copies) if n_copies else []
    for path in sorted(copies):
        copy = path.with_name(f"{path.stem}_copy.jsonl")
        shutil.copyfile(path, copy)
        zone.copies.append(str(copy))
        zone.replayed_lines += sum(1 for _ in copy.open())
    zone.lines += zone.replayed_lines
    zone.seconds = time.monotonic() - started
    saved = {f.name: getattr(zone, f.name) for f in fields(zone) if f.name != "live_records"}
    (out / "_zone.json").write_text(json.dumps(saved, indent=1))
    return zone


def release_increment(zone: Zone, n: int = 1) -> list[str]:
    """Move the n-th held-back increment's files into the landing zone; return their new paths."""
    moved = []
    for src in zone.increments[n - 1]:
        dest = zone.source_dir / Path(src).name
        shutil.move(src, dest)
        moved.append(str(dest))
    return moved


def _ratio(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def add_knob_args(parser: argparse.ArgumentParser) -> None:
    d = Knobs()
    parser.add_argument("--tables", type=int, default=d.tables, help=f"tables (default {d.tables})")
    parser.add_argument(
        "--keys", type=int, default=d.keys, help=f"distinct keys, all tables (default {d.keys:,})"
    )
    parser.add_argument(
        "--touches-per-txn", type=int, default=d.touches_per_txn, help="changes per transaction"
    )
    parser.add_argument(
        "--delete-ratio", type=_ratio, default=d.delete_ratio, help="share of live-key touches"
    )
    parser.add_argument("--omitted-ratio", type=_ratio, default=d.omitted_ratio, help="updates without doc")
    parser.add_argument("--replay-ratio", type=_ratio, default=d.replay_ratio, help="share of files copied")
    parser.add_argument(
        "--key-move-ratio",
        type=_ratio,
        default=d.key_move_ratio,
        help=f"share of updates that change the row's key (default {d.key_move_ratio})",
    )
    parser.add_argument(
        "--wide",
        action="store_true",
        help="tables of 40 columns of mixed types, about 2 KB of values per row (default 6 columns)",
    )
    parser.add_argument(
        "--doc-bytes", type=int, help=f"length of the TOAST-able text (default 120, {WIDE_DOC_BYTES} wide)"
    )
    parser.add_argument("--lines-per-file", type=int, default=d.lines_per_file)
    parser.add_argument("--seed", type=int, default=d.seed)


def knobs_from(args: argparse.Namespace, changes: int, holdback: int = 0, increments: int = 1) -> Knobs:
    return Knobs(
        changes=changes,
        tables=args.tables,
        keys=args.keys,
        touches_per_txn=args.touches_per_txn,
        delete_ratio=args.delete_ratio,
        omitted_ratio=args.omitted_ratio,
        replay_ratio=args.replay_ratio,
        lines_per_file=args.lines_per_file,
        doc_bytes=args.doc_bytes,
        holdback=holdback,
        increments=increments,
        seed=args.seed,
        key_move_ratio=args.key_move_ratio,
        wide=args.wide,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--changes", type=int, default=Knobs.changes)
    parser.add_argument("--holdback", type=int, default=0, help="changes written to _increment/ instead")
    add_knob_args(parser)
    args = parser.parse_args(argv)
    zone = generate(args.out, knobs_from(args, args.changes, args.holdback))
    print(
        f"generated {zone.changes:,} changes ({zone.lines:,} lines, {len(zone.files)} files + "
        f"{len(zone.copies)} copies) in {zone.seconds:.1f}s: {zone.changes / zone.seconds:,.0f} changes/s; "
        f"{zone.live:,} live records; {zone.key_moves:,} key moves"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
