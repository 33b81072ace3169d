{#-
    Every column each captured table has shown in the change stream, with the type the capture sent
    for it and the Spark type that maps to: one row per source table, column and source type, with
    the first and last positions it was seen at. A column added at the source appears with its
    first change; a type change shows as a second row for the column, whose first position is
    where the new type begins.

    landed -> type_sets (one row per table and set of column types) -> seen (one row per column
      and type of each set) -> batch_columns
    batch_columns (+ this, for the keys seen again) -> combined -> final

    An incremental run reads the batches landed since the greatest batch_id it has recorded. It
    reads every landed change, not only the consumable ones: a type is a fact of the stream, whether
    or not its transaction is complete yet.
-#}
{%- set column_key = ['source_id', 'source_schema', 'source_table', 'column_name', 'source_type'] -%}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=column_key,
        on_schema_change='append_new_columns',
    )
}}
{#- on_schema_change 'append_new_columns': a column added here later reaches the existing table. #}
{#- The greatest batch recorded, read first: Delta skips the earlier batches' files (`recorded_batch`). #}
{%- set recorded = recorded_batch(this) if is_incremental() else 0 %}

with

landed as (

    select * from {{ ref('stg_wal__events') }}
    where
        column_types is not null
        {%- if is_incremental() %}
            and batch_id > {{ recorded }}
        {%- endif %}

),

-- The changes of a table carry the same column types, change after change: one row per table and
-- set of column types (a map is not a grouping key, its entries are), with the first and last
-- positions it was seen at. Exploded after this, a run's columns cost a row per table and set of
-- types, not a row per change and column.
type_sets as (

    select
        source_id,
        source_schema,
        source_table,
        map_entries(column_types) as column_entries,
        min(struct(commit_lsn, commit_idx, committed_at)) as first_seen,
        max(struct(commit_lsn, commit_idx, committed_at)) as last_seen,
        max(batch_id) as last_batch_id

    from landed
    group by source_id, source_schema, source_table, map_entries(column_types)

),

-- A column whose type the capture did not send (wal2json's include-types off) has no type to record.
seen as (

    select
        type_sets.source_id,
        type_sets.source_schema,
        type_sets.source_table,
        types.column_name,
        types.source_type,
        types.column_position,
        type_sets.first_seen,
        type_sets.last_seen,
        type_sets.last_batch_id

    from type_sets
        lateral view posexplode(map_from_entries(type_sets.column_entries)) types
        as column_position, column_name, source_type
    where types.source_type is not null

),

batch_columns as (

    -- A column's position is one in a set of types: ordering by the set's position first, then
    -- the column's, gives the least (greatest) position of any change that held the column.
    select
        {{ column_key | join(',\n        ') }},
        min(
            struct(
                first_seen.commit_lsn,
                first_seen.commit_idx,
                first_seen.committed_at,
                column_position
            )
        ) as first_seen,
        max(
            struct(
                last_seen.commit_lsn,
                last_seen.commit_idx,
                last_seen.committed_at,
                column_position
            )
        ) as last_seen,
        max(last_batch_id) as last_batch_id

    from seen
    group by {{ column_key | join(', ') }}

),

-- A late file can hold an earlier position than one recorded: the recorded row and this run's are
-- folded together, so first_seen stays the least position and last_seen the greatest.
combined as (

    select * from batch_columns
    {%- if is_incremental() %}

        union all

        select
            {{ column_key | join(',\n            ') }},
            struct(
                recorded.first_commit_lsn as commit_lsn,
                recorded.first_commit_idx as commit_idx,
                recorded.first_committed_at as committed_at,
                recorded.column_position
            ) as first_seen,
            struct(
                recorded.last_commit_lsn as commit_lsn,
                recorded.last_commit_idx as commit_idx,
                recorded.last_committed_at as committed_at,
                recorded.column_position
            ) as last_seen,
            recorded.last_batch_id

        from {{ this }} as recorded
        left semi join batch_columns
            on {{ columns_equal('recorded', 'batch_columns', column_key) }}
    {%- endif %}

),

folded as (

    select
        {{ column_key | join(',\n        ') }},
        min(first_seen) as first_seen,
        max(last_seen) as last_seen,
        max(last_batch_id) as last_batch_id

    from combined
    group by {{ column_key | join(', ') }}

),

final as (

    select
        {{ column_key | join(',\n        ') }},
        {{ spark_type_for('source_type') }} as spark_type,
        first_seen.column_position,
        first_seen.commit_lsn as first_commit_lsn,
        {{ lsn_to_text('first_seen.commit_lsn') }} as first_commit_lsn_text,
        first_seen.commit_idx as first_commit_idx,
        first_seen.committed_at as first_committed_at,
        last_seen.commit_lsn as last_commit_lsn,
        {{ lsn_to_text('last_seen.commit_lsn') }} as last_commit_lsn_text,
        last_seen.commit_idx as last_commit_idx,
        last_seen.committed_at as last_committed_at,
        last_batch_id

    from folded

)

select * from final
