"""The single-node peer: DuckDB doing wal_lake's logic on the same wal2json files.

Parse the lines, frame changes by their transaction's ``C`` record (by ``xid``), drop replayed
duplicates (same commit LSN and change LSN), number ``seq`` in ``(commit_lsn, change_lsn)`` order and
write that log as Parquet; then the current state per record: the last touch wins, a final delete
removes the record, an update keeps the previous value of every column it left out (each column's
value is the latest one sent since the record's last insert), and an update that changed the key
(wal2json's ``identity`` holds the old key) moves the row: the old key is gone, the new key carries
the row's values, the ones the update left out included. Written as Parquet too.

DuckDB's JSON reader reads a JSON number as a double (``10.50`` becomes ``10.5``), so numeric texts
differ from wal_lake's; the benchmark compares row counts. Requires ``duckdb``
(benchmarks/requirements.txt).
"""

from __future__ import annotations

import time

from benchmarks import PeerResult

_COLUMN = "STRUCT(name VARCHAR, type VARCHAR, value JSON)[]"
_COLUMNS = {
    "action": "VARCHAR",
    "xid": "BIGINT",
    "lsn": "VARCHAR",
    "timestamp": "VARCHAR",
    "schema": "VARCHAR",
    "table": "VARCHAR",
    "columns": _COLUMN,
    "identity": _COLUMN,
    "pk": "STRUCT(name VARCHAR, type VARCHAR)[]",
}


def _lsn(col: str) -> str:
    return (
        f"((('0x' || split_part({col}, '/', 1))::BIGINT << 32) | ('0x' || split_part({col}, '/', 2))::BIGINT)"
    )


def _text(value: str) -> str:
    return f"case when json_type({value}) = 'VARCHAR' then {value} ->> '$' else {value}::VARCHAR end"


LOG_SQL = f"""
with lines as (
    select * from read_json($files, format = 'newline_delimited', columns = $columns)
),
commits as (
    select xid, any_value({_lsn("lsn")}) as commit_lsn from lines where action = 'C' group by xid
),
changes as (
    select
        commits.commit_lsn,
        {_lsn("lines.lsn")} as change_lsn,
        lines.action,
        lines.schema,
        lines."table",
        to_json(list_transform(
            lines.pk,
            k -> {
    _text(
        "list_filter(case when lines.action = 'D' then lines.identity else lines.columns end, "
        "c -> c.name = k.name)[1].value"
    )
}
        )) as record_pk,
        case when lines.action != 'D' then lines.columns end as columns,
        case when lines.action = 'U' then to_json(list_transform(
            lines.pk,
            k -> {_text("list_filter(lines.identity, c -> c.name = k.name)[1].value")}
        )) end as old_pk
    from lines
    join commits on lines.xid = commits.xid
    where lines.action in ('I', 'U', 'D')
),
deduplicated as (
    select * exclude (old_pk), nullif(old_pk, record_pk) as old_record_pk from changes
    qualify row_number() over (partition by commit_lsn, change_lsn) = 1
)
select row_number() over (order by commit_lsn, change_lsn) as seq, * from deduplicated
"""

# The touches of a key a move never touched fold per key: each column's latest value since the last
# insert. The few keys a move touched fold per row instead (its lineage): a key's touches split into
# lives, each begun by an insert or a move into the key; a move's life continues the moved-from key's
# life current at the move, and the links followed back to an insert name the row.
STATE_SQL = f"""
with recursive
log as (select * from read_parquet($log)),
moved_keys as (
    select schema, "table", record_pk from log where old_record_pk is not null
    union
    select schema, "table", old_record_pk from log where old_record_pk is not null
),
still as (select * from log anti join moved_keys using (schema, "table", record_pk)),
keys as (
    select
        schema, "table", record_pk,
        max(seq) as seq,
        arg_max(action, seq) as last_action,
        max(seq) filter (where action = 'I') as inserted_seq
    from still
    group by all
),
live as (select * from keys where last_action != 'D'),
cols as (
    select schema, "table", record_pk, seq, unnest(columns) as c from still where action != 'D'
),
latest as (
    select
        cols.schema, cols."table", cols.record_pk,
        cols.c.name as name,
        arg_max({_text("cols.c.value")}, cols.seq) as value
    from cols
    join live using (schema, "table", record_pk)
    where cols.seq >= coalesce(live.inserted_seq, 0)
    group by all
),
moved as (
    select
        *,
        coalesce(
            max(case when action = 'I' or old_record_pk is not null then seq end) over (
                partition by schema, "table", record_pk order by seq
                rows between unbounded preceding and current row
            ),
            min(seq) over (partition by schema, "table", record_pk)
        ) as life
    from (select * from log semi join moved_keys using (schema, "table", record_pk))
),
links as (
    select m.seq as child, max(l.life) as parent
    from moved as m
    join moved as l
        on l.schema = m.schema and l."table" = m."table" and l.record_pk = m.old_record_pk and l.life < m.seq
    group by m.seq
),
roots as (
    select child, parent as root from links where parent not in (select child from links)
    union all
    select links.child, roots.root from links join roots on links.parent = roots.child
),
moved_touches as (
    select moved.*, coalesce(roots.root, moved.life) as lineage
    from moved left join roots on moved.life = roots.child
),
moved_rows as (
    select
        schema, "table", lineage,
        max(seq) as seq,
        arg_max(record_pk, seq) as record_pk,
        arg_max(action, seq) as last_action
    from moved_touches
    group by all
),
moved_live as (select * from moved_rows where last_action != 'D'),
moved_latest as (
    select
        t.schema, t."table", t.lineage,
        t.c.name as name,
        arg_max({_text("t.c.value")}, t.seq) as value
    from (
        select schema, "table", lineage, seq, unnest(columns) as c from moved_touches where action != 'D'
    ) as t
    join moved_live using (schema, "table", lineage)
    group by all
)
select
    live.schema, live."table", live.record_pk, live.seq,
    map_from_entries(list(struct_pack(k := latest.name, v := latest.value))) as record
from live
join latest using (schema, "table", record_pk)
group by live.schema, live."table", live.record_pk, live.seq
union all
select
    moved_live.schema, moved_live."table", moved_live.record_pk, moved_live.seq,
    map_from_entries(list(struct_pack(k := moved_latest.name, v := moved_latest.value))) as record
from moved_live
join moved_latest using (schema, "table", lineage)
group by moved_live.schema, moved_live."table", moved_live.record_pk, moved_live.seq
"""


def run(files: list[str], out: str, threads: int = 2, memory_limit: str = "4GB") -> PeerResult:
    import duckdb

    con = duckdb.connect(config={"threads": threads, "memory_limit": memory_limit})
    t0 = time.monotonic()
    con.execute(
        f"copy ({LOG_SQL}) to '{out}/log.parquet' (format parquet)", {"files": files, "columns": _COLUMNS}
    )
    t1 = time.monotonic()
    con.execute(
        f"copy ({STATE_SQL}) to '{out}/state.parquet' (format parquet)", {"log": f"{out}/log.parquet"}
    )
    t2 = time.monotonic()
    log_rows = con.execute(f"select count(*) from read_parquet('{out}/log.parquet')").fetchone()[0]
    state_rows = con.execute(f"select count(*) from read_parquet('{out}/state.parquet')").fetchone()[0]
    con.close()
    return PeerResult(t1 - t0, t2 - t1, log_rows, state_rows)


def state_rows(out: str) -> list[tuple]:
    """(schema, table, record_pk, record) of the state written by ``run`` (for checks)."""
    import duckdb

    con = duckdb.connect()
    rows = con.execute(
        f"select schema, \"table\", record_pk, record from read_parquet('{out}/state.parquet')"
    )
    return [(s, t, k, dict(r)) for s, t, k, r in rows.fetchall()]
