{#-
    Per table and set of key columns, the first and the last change that named them: what
    unannounced_ddl orders to find a table whose key columns changed. Kept a seq range at a time
    (docs/contract.md, "A model that reads by seq"), so that a run reads sequin_events' new rows
    only, and unannounced_ddl reads this table (a row per table and key) instead of every change.

    sequin_events, seq in (consumed, upto], row changes with key columns
      -> range_spans (one row per table and key columns)
    merged on the table and key columns: the earlier first, the later last, the counts summed
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['source_id', 'source_schema', 'source_table', 'key_columns'],
        on_schema_change='fail',
        post_hook=["{{ stamp_unwritten_run() }}", "{{ unstamp_consumed_seq() }}"],
        meta={'wal_lake_reads_by_seq': {'reads': 'sequin_events', 'subscriptions': false}},
    )
}}
{%- set bounds = fold_run_bounds(this, ref('sequin_events'), is_incremental(), chains=false) -%}
{%- do stamp_run(bounds) -%}
{%- do merge_update_expressions({
    'first_seen': 'least(DBT_INTERNAL_DEST.first_seen, DBT_INTERNAL_SOURCE.first_seen)',
    'last_seen': 'greatest(DBT_INTERNAL_DEST.last_seen, DBT_INTERNAL_SOURCE.last_seen)',
    'change_count': 'DBT_INTERNAL_DEST.change_count + DBT_INTERNAL_SOURCE.change_count',
}) -%}

with

sequin as (

    select * from {{ ref('sequin_events') }}
    where seq > {{ bounds.consumed }} and seq <= {{ bounds.upto }}

),

-- Row changes only: a truncate or a message names no key.
range_spans as (

    select
        source_id,
        source_schema,
        source_table,
        key_columns,
        min(struct(commit_lsn, commit_idx, committed_at)) as first_seen,
        max(struct(commit_lsn, commit_idx, committed_at)) as last_seen,
        count(*) as change_count

    from sequin
    where
        action in ('insert', 'update', 'delete', 'read')
        and key_columns is not null
    group by source_id, source_schema, source_table, key_columns

)

select * from range_spans
