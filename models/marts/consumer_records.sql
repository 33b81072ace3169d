{#-
    One row per consumer and live source record: source_records (the touches of every table folded
    once, by the contract's rules, in source_records.sql) projected onto each consumer's subscribed tables.

    records (source_records, seq in (consumed, upto]) -> touched_tables
    touched_tables + subscriptions -> subscribed_tables (a pattern matched once per table)
    records + subscribed_tables -> final (a tombstone row deletes the consumer's record)

    An incremental run takes the source_records rows past the seq stamped on its own last commit,
    up to the seq stamped on source_records' (`records_run_bounds`), and merges them: a live row
    replaces the consumer's record, a tombstone (a delete, a key moved away, a truncate) deletes
    it. A full refresh takes the live rows. It rebuilds itself in full (`should_full_refresh`) when
    its stamp no longer matches what it was built from: source_records rebuilt (seq renumbered)
    or the consumers seed changed.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['consumer_name', 'source_id', 'source_schema', 'source_table', 'record_pk'],
        merge_delete_column='is_deleted',
        on_schema_change='ignore',
        post_hook=["{{ stamp_unwritten_run() }}", "{{ unstamp_consumed_seq() }}"],
        meta={'wal_lake_reads_by_seq': {'reads': 'source_records', 'subscriptions': true}},
    )
}}
{#-
    on_schema_change 'ignore': an incremental run selects `is_deleted`, a helper the merge reads and
    never writes, so the select never matches the table's columns ('fail' would always fail and
    'append_new_columns' would add it). A change of the written columns takes a full refresh.
-#}
{%- set incremental = is_incremental() -%}
{%- set bounds = records_run_bounds(
    this, ref('source_records'), incremental, ref('int_consumer_subscriptions')
) -%}
{#-
    `upto` rides on the model's own Delta commit (its merge or create), so the next run starts
    exactly where this one ended; the post-hook clears the mark. A run with no seq past the
    consumed one runs no merge.
-#}
{%- do stamp_run(bounds) -%}

with

records as (

    select * from {{ ref('source_records') }}
    where
        seq > {{ bounds.consumed }}
        and seq <= {{ bounds.upto }}

),

subscriptions as (

    select * from {{ ref('int_consumer_subscriptions') }}

),

touched_tables as (

    select distinct
        source_id,
        source_schema,
        source_table

    from records

),

-- Patterns are matched once per table, not per record; a consumer whose patterns overlap
-- subscribes to a table once.
subscribed_tables as (

    select distinct
        subscriptions.consumer_name,
        touched_tables.source_id,
        touched_tables.source_schema,
        touched_tables.source_table

    from touched_tables
    inner join subscriptions
        on
            {{ table_matches(
                'touched_tables.source_schema',
                'touched_tables.source_table',
                'subscriptions.schema_glob',
                'subscriptions.table_glob'
            ) }}

),

-- A handful of tables per consumer: broadcast, so the records are not shuffled for the join.
final as (

    select /*+ broadcast(subscribed_tables) */
        subscribed_tables.consumer_name,
        records.*

    from records
    inner join subscribed_tables
        on {{ columns_equal('records', 'subscribed_tables', ['source_id', 'source_schema', 'source_table']) }}

)

{% if incremental -%}
    -- A tombstone's is_deleted makes the merge delete the consumer's record; it is never written.
    select * from final
{%- else -%}
    -- A full refresh writes the live records.
    select * except (is_deleted) from final
    where not is_deleted
{%- endif %}
