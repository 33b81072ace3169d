{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['source_id', 'commit_lsn', 'commit_idx'],
        merge_update=false,
        on_schema_change='append_new_columns',
    )
}}
{#-
    on_schema_change 'append_new_columns': a `seq` once assigned never changes, so a column the
    model gains (old_identity) is added to the existing table, null on the rows logged before it,
    instead of forcing a full refresh that would renumber the log. A column is never dropped.
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

lookups as (

    -- REPLICA IDENTITY USING INDEX on columns other than the key: an update or delete whose identity
    -- lacks the key landed its identity in old_identity, for the old key to be resolved here: the
    -- record_pk of the latest earlier non-delete row of the table (this run's or the log's) whose
    -- record has those values on the identity's columns. An update's own record_pk is its new key,
    -- so a chain of moves in one run resolves without recursion. A delete that nothing earlier
    -- resolves keeps a null record_pk (keyless_changes counts it).
    select
        source_id,
        source_schema,
        source_table,
        commit_lsn,
        commit_idx,
        old_identity,
        array_sort(map_keys(old_identity)) as identity_columns

    from new_changes
    where old_identity is not null

),

identities as (

    select
        source_id,
        source_schema,
        source_table,
        commit_lsn,
        commit_idx,
        identity_columns,
        transform(identity_columns, identity_column -> old_identity[identity_column]) as identity_values

    from lookups

),

identity_columns as (

    select distinct
        source_id,
        source_schema,
        source_table,
        identity_columns

    from identities

),

logged_states as (

    {% if is_incremental() -%}
        select
            source_id,
            source_schema,
            source_table,
            commit_lsn,
            commit_idx,
            action,
            record_pk,
            record
        from {{ this }}
    {%- else -%}
        select
            source_id,
            source_schema,
            source_table,
            commit_lsn,
            commit_idx,
            action,
            record_pk,
            record
        from new_changes
        where false
    {%- endif %}

),

known_states as (

    select
        source_id,
        source_schema,
        source_table,
        commit_lsn,
        commit_idx,
        record_pk,
        record

    from new_changes
    where action not in ('delete', 'truncate') and record_pk is not null

    union all

    select
        source_id,
        source_schema,
        source_table,
        commit_lsn,
        commit_idx,
        record_pk,
        record

    from logged_states
    where action not in ('delete', 'truncate') and record_pk is not null

),

identified_states as (

    select
        known_states.source_id,
        known_states.source_schema,
        known_states.source_table,
        known_states.commit_lsn,
        known_states.commit_idx,
        known_states.record_pk,
        identity_columns.identity_columns,
        transform(
            identity_columns.identity_columns, identity_column -> known_states.record[identity_column]
        ) as identity_values

    from known_states
    inner join identity_columns
        on
            known_states.source_id = identity_columns.source_id
            and known_states.source_schema = identity_columns.source_schema
            and known_states.source_table = identity_columns.source_table

),

states_and_lookups as (

    select
        identified_states.*,
        true as is_known_state

    from identified_states
    left semi join identities
        on
            identified_states.source_id = identities.source_id
            and identified_states.source_schema = identities.source_schema
            and identified_states.source_table = identities.source_table
            and identified_states.identity_columns = identities.identity_columns
            and identified_states.identity_values = identities.identity_values

    union all

    select
        source_id,
        source_schema,
        source_table,
        commit_lsn,
        commit_idx,
        cast(null as string) as record_pk,
        identity_columns,
        identity_values,
        false as is_known_state

    from identities

),

old_keys as (

    select
        source_id,
        commit_lsn,
        commit_idx,
        is_known_state,
        -- A known state at the lookup's own position (an update leaving its identity as it was)
        -- sorts after the lookup, so it is not taken for the state before the change.
        last(record_pk, true) over (
            partition by source_id, source_schema, source_table, identity_columns, identity_values
            order by commit_lsn, commit_idx, is_known_state
            rows between unbounded preceding and 1 preceding
        ) as old_key

    from states_and_lookups

),

resolved_changes as (

    select
        new_changes.* except (record_pk, old_record_pk),
        case
            when new_changes.action = 'delete' then coalesce(new_changes.record_pk, old_keys.old_key)
            else new_changes.record_pk
        end as record_pk,
        case
            when new_changes.action = 'update' and old_keys.old_key != new_changes.record_pk
                then coalesce(new_changes.old_record_pk, old_keys.old_key)
            else new_changes.old_record_pk
        end as old_record_pk

    from new_changes
    left join old_keys
        on
            new_changes.source_id = old_keys.source_id
            and new_changes.commit_lsn = old_keys.commit_lsn
            and new_changes.commit_idx = old_keys.commit_idx
            and not old_keys.is_known_state

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
            order by resolved_changes.source_id, resolved_changes.commit_lsn, resolved_changes.commit_idx
        ) as seq,
        resolved_changes.source_id,
        resolved_changes.commit_lsn,
        {{ lsn_to_text('resolved_changes.commit_lsn') }} as commit_lsn_text,
        resolved_changes.commit_idx,
        resolved_changes.change_lsn,
        resolved_changes.xid,
        resolved_changes.committed_at,
        resolved_changes.action,
        resolved_changes.source_schema,
        resolved_changes.source_table,
        resolved_changes.key_columns,
        resolved_changes.record_pk,
        resolved_changes.record,
        resolved_changes.changes,
        resolved_changes.old_record_pk,
        resolved_changes.old_identity,
        resolved_changes.change_hash,
        resolved_changes.batch_id,
        resolved_changes.ingested_at

    from resolved_changes
    cross join max_seq

)

select * from final
