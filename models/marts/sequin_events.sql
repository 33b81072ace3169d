{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['source_id', 'commit_lsn', 'commit_idx'],
        merge_update=false,
        on_schema_change='fail',
    )
}}
{#-
    on_schema_change 'fail': a run's select has exactly the table's columns, and a `seq` once
    assigned never changes, so a changed column set must be a deliberate full refresh, never a
    silent append or drop.
-#}

{#-
    Incremental runs read only batches past what each source has consumed (a literal lower bound,
    so Delta's file statistics on batch_id skip the history) and keep only positions above the
    source's greatest consumed position. Anything at or below it is a replay or a violation: both
    stay out of this table; sequin_violations reports the second kind.
-#}
{%- set consumed = consumed_positions(this) if is_incremental() else [] -%}

with

events as (

    select * from {{ ref('int_events_consumable') }}
    {%- if consumed %}
        where batch_id > {{ consumed | map(attribute='batch_id') | min }}
    {%- endif %}

),

deduplicated as (

    {{ first_row_per_key('events', ['source_id', 'commit_lsn', 'commit_idx'], 'batch_id, landing_file, landing_line') }}

),

consumed as (

    {{ consumed_positions_relation(consumed) }}

),

new_changes as (

    select deduplicated.*
    from deduplicated
    left join consumed
        on deduplicated.source_id = consumed.source_id
    where
        consumed.source_id is null
        or deduplicated.commit_lsn > consumed.commit_lsn
        or (deduplicated.commit_lsn = consumed.commit_lsn and deduplicated.commit_idx > consumed.commit_idx)

),

max_seq as (

    {% if is_incremental() -%}
        select coalesce(max(seq), 0) as seq from {{ this }}
    {%- else -%}
        select cast(0 as bigint) as seq
    {%- endif %}

),

final as (

    select
        max_seq.seq
        + row_number() over (
            order by new_changes.source_id, new_changes.commit_lsn, new_changes.commit_idx
        ) as seq,
        new_changes.source_id,
        new_changes.commit_lsn,
        {{ lsn_to_text('new_changes.commit_lsn') }} as commit_lsn_text,
        new_changes.commit_idx,
        new_changes.change_lsn,
        new_changes.xid,
        new_changes.committed_at,
        new_changes.action,
        new_changes.source_schema,
        new_changes.source_table,
        new_changes.key_columns,
        new_changes.record_pk,
        new_changes.record,
        new_changes.changes,
        new_changes.old_record_pk,
        new_changes.change_hash,
        new_changes.batch_id,
        new_changes.ingested_at

    from new_changes
    cross join max_seq

)

select * from final
