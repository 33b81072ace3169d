-- Traces in the data of DDL that logical decoding does not send (docs/contract.md, "DDL the stream
-- does not carry"): a table whose key columns changed between two of its changes (a new or
-- changed primary key), and a column that stopped appearing where a new column of the same type
-- began (a column rename, or a drop and an add). Either leaves old and new rows mixed in
-- consumer_records and the mirrors; this reports it, and its data test warns while it is not empty.
-- Reads key_column_spans (a row per table and set of key columns, kept a seq range at a time) and
-- the column_registry (a row per column): neither grows with the changes, so this is a view (a
-- table would cost a build its rewrite, more than the view's readers pay).
{{ config(materialized='view') }}

with

key_spans as (

    select * from {{ ref('key_column_spans') }}

),

registry as (

    select * from {{ ref('column_registry') }}

),

key_changes as (

    select
        source_id,
        source_schema,
        source_table,
        'key columns changed' as change_kind,
        to_json(lag(key_columns) over table_keys) as before_value,
        to_json(key_columns) as after_value,
        lag(last_seen.commit_lsn) over table_keys as before_last_commit_lsn,
        first_seen.commit_lsn as after_first_commit_lsn,
        first_seen.committed_at as after_first_committed_at

    from key_spans
    window table_keys as (
        partition by source_id, source_schema, source_table
        order by first_seen
    )

),

-- One span per column, whatever its types: a type change is not a rename.
column_spans as (

    select
        source_id,
        source_schema,
        source_table,
        column_name,
        max_by(source_type, last_commit_lsn) as last_source_type,
        min_by(source_type, first_commit_lsn) as first_source_type,
        min(struct(first_commit_lsn, first_commit_idx, first_committed_at)) as first_seen,
        max(struct(last_commit_lsn, last_commit_idx)) as last_seen

    from registry
    group by source_id, source_schema, source_table, column_name

),

table_starts as (

    select
        source_id,
        source_schema,
        source_table,
        min(first_seen) as table_first_seen

    from column_spans
    group by source_id, source_schema, source_table

),

-- A column that begins after the table's first change, paired with each column of its type that
-- was last sent before it began and never after.
column_changes as (

    select
        added.source_id,
        added.source_schema,
        added.source_table,
        'column renamed or replaced' as change_kind,
        gone.column_name as before_value,
        added.column_name as after_value,
        gone.last_seen.last_commit_lsn as before_last_commit_lsn,
        added.first_seen.first_commit_lsn as after_first_commit_lsn,
        added.first_seen.first_committed_at as after_first_committed_at

    from column_spans as added
    inner join table_starts
        on
            added.source_id = table_starts.source_id
            and added.source_schema = table_starts.source_schema
            and added.source_table = table_starts.source_table
    inner join column_spans as gone
        on
            added.source_id = gone.source_id
            and added.source_schema = gone.source_schema
            and added.source_table = gone.source_table
            and added.first_source_type = gone.last_source_type
            and added.column_name != gone.column_name
    where
        added.first_seen > table_starts.table_first_seen
        and struct(gone.last_seen.last_commit_lsn, gone.last_seen.last_commit_idx)
        < struct(added.first_seen.first_commit_lsn, added.first_seen.first_commit_idx)

),

final as (

    select * from key_changes
    where before_value is not null

    union all

    select * from column_changes

)

select * from final
