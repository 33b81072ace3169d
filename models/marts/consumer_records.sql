{#-
    Applies the changes of sequin_events with seq in (consumed, upto] to every subscribed consumer.

    sequin -> flattenable (keyed rows, truncates) -> touched_tables (+ subscriptions) -> subscribed_tables
    flattenable + subscribed_tables -> subscribed -> truncates
                                       subscribed -> touches -> live_touches (minus what a truncate voided)
    this (+ truncates) -> existing -> starting_records
    live_touches + starting_records -> key_move_bases -> move_bases   (only when a key moved)
    live_touches + move_bases -> touches_with_bases
    touches_with_bases + starting_records -> flattened (fold in seq order) -> applied
    existing, untouched since a truncate of its table -> truncated
    applied + truncated -> combined -> final

    It rebuilds itself in full (`should_full_refresh`) when its stamp no longer matches what it was
    built from: sequin_events rebuilt (seq renumbered) or the consumers seed changed.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['consumer_name', 'source_id', 'source_schema', 'source_table', 'record_pk'],
        merge_delete_column='is_deleted',
        on_schema_change='ignore',
        post_hook="{{ unstamp_consumed_seq() }}",
        meta={'wal_lake_consumer': true},
    )
}}
{#-
    on_schema_change 'ignore': an incremental run selects `is_deleted`, a helper the merge reads and
    never writes, so the select never matches the table's columns ('fail' would always fail and
    'append_new_columns' would add it). A change of the written columns takes a full refresh.
-#}
{%- set table_key = ['consumer_name', 'source_id', 'source_schema', 'source_table'] -%}
{%- set record_key = table_key + ['record_pk'] -%}
{%- set incremental = is_incremental() -%}
{%- set bounds = consumer_run_bounds(
    this, ref('sequin_events'), ref('int_consumer_subscriptions'), incremental
) -%}
{#-
    `upto` rides on the model's own Delta commit (its merge or create), so the next run starts
    exactly where this one ended, even when its last touches were deletes; the post-hook clears the
    mark. Only a run that writes stamps: not a compile, not a unit test.
-#}
{%- if execute and flags.WHICH in ('run', 'build') and model.resource_type == 'model' -%}
    {%- do run_query(stamp_consumed_seq(bounds)) -%}
{%- endif -%}
{#-
    A few key moves are broadcast, so only the touches of moved-from keys are shuffled; a mass
    re-key falls back to a shuffle join.
-#}
{%- set broadcast_moves = bounds.key_moves <= var('wal_lake_broadcast_key_moves', 200000) | int %}
{#- Chains of moves (a row moved twice) resolve in one pass when listed, by recursion otherwise. #}
{%- set chains = bounds.get('key_move_chains') %}

with{% if bounds.key_moves and chains is none %} recursive{% endif %}

sequin as (

    select * from {{ ref('sequin_events') }}
    where seq > {{ bounds.consumed }} and seq <= {{ bounds.upto }}

),

subscriptions as (

    select * from {{ ref('int_consumer_subscriptions') }}

),

-- Changes of a table without a key (null record_pk) have no record to flatten on: they stay in
-- sequin_events, counted by keyless_changes. Truncates apply to every table.
flattenable as (

    select *
    from sequin
    where record_pk is not null or action = 'truncate'

),

touched_tables as (

    select distinct
        source_id,
        source_schema,
        source_table

    from flattenable

),

-- Patterns are matched once per table, not per change; a consumer whose patterns overlap
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

subscribed as (

    select
        subscribed_tables.consumer_name,
        flattenable.*

    from flattenable
    inner join subscribed_tables
        on {{ columns_equal('flattenable', 'subscribed_tables', table_key[1:]) }}

),

truncates as (

    select
        consumer_name,
        source_id,
        source_schema,
        source_table,
        max(seq) as truncated_seq

    from subscribed
    where action = 'truncate'
    group by consumer_name, source_id, source_schema, source_table

),

-- Every touch of a record key. A change that moved a row to a new key also deletes the old key.
touches as (

    select
        consumer_name,
        source_id,
        source_schema,
        source_table,
        record_pk,
        old_record_pk,
        seq,
        commit_lsn,
        commit_idx,
        committed_at,
        action,
        record

    from subscribed
    where action in ('insert', 'update', 'delete', 'read')
    {%- if bounds.key_moves %}

        union all

        select
            consumer_name,
            source_id,
            source_schema,
            source_table,
            old_record_pk as record_pk,
            cast(null as string) as old_record_pk,
            seq,
            commit_lsn,
            commit_idx,
            committed_at,
            'delete' as action,
            {{ null_record() }} as record

        from subscribed
        where {{ is_key_change() }}
    {%- endif %}

),

-- A truncate voids every touch of its table before it. There is at most one truncates row per
-- consumer and table: broadcast, so the touches are not shuffled by table.
live_touches as (

    select /*+ broadcast(truncates) */ touches.*
    from touches
    left join truncates
        on
            {{ columns_equal('touches', 'truncates', table_key) }}
    where truncates.truncated_seq is null or touches.seq > truncates.truncated_seq

),

existing as (

    {% if incremental -%}
        select /*+ broadcast(truncates) */
            existing_records.*,
            truncates.truncated_seq

        from {{ this }} as existing_records
        left join truncates
            on
                {{ columns_equal('existing_records', 'truncates', table_key) }}
    {%- else -%}
        select
            cast(null as string) as consumer_name,
            cast(null as string) as source_id,
            cast(null as string) as source_schema,
            cast(null as string) as source_table,
            cast(null as string) as record_pk,
            {{ null_record() }} as record,
            cast(null as bigint) as seq,
            cast(null as bigint) as commit_lsn,
            cast(null as string) as commit_lsn_text,
            cast(null as int) as commit_idx,
            cast(null as timestamp) as committed_at,
            cast(null as string) as action,
            cast(null as bigint) as truncated_seq
        where false
    {%- endif %}

),

-- The record each key held before this run, unless a truncate in this run removed it.
starting_records as (

    select *
    from existing
    where truncated_seq is null or seq > truncated_seq

),
{%- if bounds.key_moves %}

    {{ key_move_bases(
        'live_touches', 'starting_records', table_key, broadcast=broadcast_moves, chains=chains
    ) }},

    touches_with_bases as (

        select
            live_touches.*,
            move_bases.base

        from live_touches
        left join move_bases
            on
                {{ columns_equal('live_touches', 'move_bases', record_key + ['seq']) }}

    ),
{%- else %}

    -- No key moved in this run: no touch has another key's record to start from.
    touches_with_bases as (

        select
            live_touches.*,
            {{ null_record() }} as base

        from live_touches

    ),
{%- endif %}

flattened as (

    select
        touches_with_bases.consumer_name,
        touches_with_bases.source_id,
        touches_with_bases.source_schema,
        touches_with_bases.source_table,
        touches_with_bases.record_pk,
        {{ fold_record(
            "collect_list(struct(
                touches_with_bases.seq,
                touches_with_bases.action,
                touches_with_bases.record,
                touches_with_bases.base
            ))",
            "first(starting_records.record, true)"
        ) }} as record,
        max_by(
            struct(
                touches_with_bases.seq,
                touches_with_bases.commit_lsn,
                touches_with_bases.commit_idx,
                touches_with_bases.committed_at,
                touches_with_bases.action
            ),
            touches_with_bases.seq
        ) as last_touch

    from touches_with_bases
    left join starting_records
        on
            {{ columns_equal('touches_with_bases', 'starting_records', record_key) }}
    group by
        touches_with_bases.consumer_name,
        touches_with_bases.source_id,
        touches_with_bases.source_schema,
        touches_with_bases.source_table,
        touches_with_bases.record_pk

),

applied as (

    select
        consumer_name,
        source_id,
        source_schema,
        source_table,
        record_pk,
        record,
        last_touch.seq as seq,
        last_touch.commit_lsn as commit_lsn,
        {{ lsn_to_text('last_touch.commit_lsn') }} as commit_lsn_text,
        last_touch.commit_idx as commit_idx,
        last_touch.committed_at as committed_at,
        last_touch.action as action,
        record is null as is_deleted

    from flattened

),

-- Records a truncate in this run removed and no later touch brought back.
truncated as (

    select
        existing.consumer_name,
        existing.source_id,
        existing.source_schema,
        existing.source_table,
        existing.record_pk,
        {{ null_record() }} as record,
        existing.seq,
        existing.commit_lsn,
        existing.commit_lsn_text,
        existing.commit_idx,
        existing.committed_at,
        'truncate' as action,
        true as is_deleted

    from existing
    left anti join applied
        on
            {{ columns_equal('existing', 'applied', record_key) }}
    where existing.seq < existing.truncated_seq

),

combined as (

    select * from applied
    union all
    select * from truncated

),

-- A full refresh writes live records only; an incremental run hands deletions to the merge.
final as (

    select *{% if not incremental %} except (is_deleted){% endif %}
    from combined
    {%- if not incremental %}
        where not is_deleted
    {%- endif %}

)

select * from final
