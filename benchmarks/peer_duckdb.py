"""The single-node peer: DuckDB doing wal_lake's logic on the same wal2json files.

Parse the lines, frame changes by their transaction's ``C`` record (by ``xid``), drop replayed
duplicates (same commit LSN and change LSN), number ``seq`` in ``(commit_lsn, change_lsn)`` order and
write that log as Parquet; then the current state per record: the last touch wins, a final delete
removes the record, an update keeps the previous value of every column it left out (each column's
value is the latest one sent since the record's last insert). Written as Parquet too.

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
        case when lines.action != 'D' then lines.columns end as columns
    from lines
    join commits on lines.xid = commits.xid
    where lines.action in ('I', 'U', 'D')
),
deduplicated as (
    select * from changes
    qualify row_number() over (partition by commit_lsn, change_lsn) = 1
)
select row_number() over (order by commit_lsn, change_lsn) as seq, * from deduplicated
"""

STATE_SQL = f"""
with log as (select * from read_parquet($log)),
keys as (
    select
        schema, "table", record_pk,
        max(seq) as seq,
        arg_max(action, seq) as last_action,
        max(seq) filter (where action = 'I') as inserted_seq
    from log
    group by all
),
live as (select * from keys where last_action != 'D'),
cols as (
    select schema, "table", record_pk, seq, unnest(columns) as c from log where action != 'D'
),
latest as (
    select
        cols.schema, cols."table", cols.record_pk,
        cols.c.name as name,
        arg_max({_text("cols.c.value")}, cols.seq) as value
    from cols
    join live using (schema, "table", record_pk)
    where cols.seq >= live.inserted_seq
    group by all
)
select
    live.schema, live."table", live.record_pk, live.seq,
    map_from_entries(list(struct_pack(k := latest.name, v := latest.value))) as record
from live
join latest using (schema, "table", record_pk)
group by live.schema, live."table", live.record_pk, live.seq
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
