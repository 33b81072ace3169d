{#-
    Applies the changes of sequin_events with seq in (consumed, upto] to every subscribed consumer.

    sequin -> touched_tables (+ subscriptions) -> subscribed_tables
    sequin -> flattenable (keyed rows, truncates) + subscribed_tables -> subscribed
                                       subscribed -> truncates          (only when the run has some)
                                       subscribed -> touches -> live_touches (minus what a truncate voided)
    this (+ truncates) -> existing -> starting_records (the touched keys' records only)
    live_touches + starting_records -> key_move_bases -> move_bases   (only when a key moved)
    live_touches + move_bases -> touches_with_bases
    touches_with_bases + starting_records -> flattened (fold in seq order) -> applied
    existing, untouched since a truncate of its table -> truncated   (only when the run has some)
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
{%- set broadcast_moves = bounds.key_moves <= var('wal_lake_broadcast_key_moves', 200000) | int -%}
{#-
    A run without truncates (the common case) leaves their steps out: they read the run's touches
    and this table once more. A unit test's bounds may not say: then the steps stay in.
-#}
{%- set with_truncates = bounds.get('truncates') is none or bounds.truncates > 0 -%}
{#-
    The records this table holds for the run's touched keys are found by broadcasting those keys,
    so the table is read but not shuffled; a run of more changes than
    `wal_lake_broadcast_touched_keys` shuffles both sides instead.
-#}
{%- set broadcast_touched = (bounds.upto - bounds.consumed) <= var('wal_lake_broadcast_touched_keys', 200000) | int %}

with

sequin as (

    select * from {{ ref('sequin_events') }}
    where seq > {{ bounds.consumed }} and seq <= {{ bounds.upto }}

),

subscriptions as (

    select * from {{ ref('int_consumer_subscriptions') }}

),

-- Patterns are matched once per table, not per change. Every table of the run, keyed or not: a
-- keyless table's changes never flatten (below) but its truncates do.
touched_tables as (

    select distinct
        source_id,
        source_schema,
        source_table

    from sequin

),

-- A consumer whose patterns overlap subscribes to a table once.
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

-- Changes of a table without a key (null record_pk) have no record to flatten on: they stay in
-- sequin_events, counted by keyless_changes. Truncates apply to every table.
flattenable as (

    select *
    from sequin
    where record_pk is not null or action = 'truncate'

),

-- The subscribed tables (a consumer per table, few rows) are broadcast: the changes are not
-- shuffled by table, which would leave each table's records to one task in the fold below.
subscribed as (

    select /*+ broadcast(subscribed_tables) */
        subscribed_tables.consumer_name,
        flattenable.*

    from flattenable
    inner join subscribed_tables
        on {{ columns_equal('flattenable', 'subscribed_tables', table_key[1:]) }}

),
{%- if with_truncates %}

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
{%- endif %}

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

live_touches as (
    {%- if with_truncates %}

        -- A truncate voids every touch of its table before it. There is at most one truncates row
        -- per consumer and table: broadcast, so the touches are not shuffled by table.
        select /*+ broadcast(truncates) */ touches.*
        from touches
        left join truncates
            on
                {{ columns_equal('touches', 'truncates', table_key) }}
        where truncates.truncated_seq is null or touches.seq > truncates.truncated_seq
    {%- else %}

        select * from touches
    {%- endif %}

),

existing as (

    {% if incremental -%}
        select {% if with_truncates %}/*+ broadcast(truncates) */ {% endif %}
            existing_records.*,
            {%- if with_truncates %}
                truncates.truncated_seq
            {%- else %}
                cast(null as bigint) as truncated_seq
            {%- endif %}

        from {{ this }} as existing_records
        {%- if with_truncates %}
            left join truncates
                on
                    {{ columns_equal('existing_records', 'truncates', table_key) }}
        {%- endif %}
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

touched_keys as (

    select distinct {{ record_key | join(', ') }}
    from live_touches

),

-- The record each touched key held before this run, unless a truncate in this run removed it.
starting_records as (

    select {% if incremental and broadcast_touched %}/*+ broadcast(touched_keys) */{% endif %}
        existing.*
    from existing
    left semi join touched_keys
        on {{ columns_equal('existing', 'touched_keys', record_key) }}
    where existing.truncated_seq is null or existing.seq > existing.truncated_seq

),
{%- if bounds.key_moves %}

    {{ key_move_bases(
        'live_touches',
        'starting_records',
        table_key,
        broadcast=broadcast_moves,
        longest_chain=bounds.get('longest_move_chain', bounds.key_moves),
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

-- Each key's touches in seq order, and the record it held before them.
flattened as (

    select
        touches_with_bases.consumer_name,
        touches_with_bases.source_id,
        touches_with_bases.source_schema,
        touches_with_bases.source_table,
        touches_with_bases.record_pk,
        {{ sort_by_seq(
            "collect_list(struct(
                touches_with_bases.seq,
                touches_with_bases.action,
                touches_with_bases.record,
                touches_with_bases.base,
                touches_with_bases.commit_lsn,
                touches_with_bases.commit_idx,
                touches_with_bases.committed_at
            ))"
        ) }} as touches,
        first(starting_records.record, true) as starting_record

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

-- The record after the last touch; the last touch names the version.
applied as (

    select
        consumer_name,
        source_id,
        source_schema,
        source_table,
        record_pk,
        {{ fold_record('touches', 'starting_record', sorted=true) }} as record,
        element_at(touches, -1).seq as seq,
        element_at(touches, -1).commit_lsn as commit_lsn,
        {{ lsn_to_text('element_at(touches, -1).commit_lsn') }} as commit_lsn_text,
        element_at(touches, -1).commit_idx as commit_idx,
        element_at(touches, -1).committed_at as committed_at,
        element_at(touches, -1).action as action

    from flattened

),
{%- if with_truncates %}

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
            'truncate' as action

        from existing
        left anti join applied
            on
                {{ columns_equal('existing', 'applied', record_key) }}
        where existing.seq < existing.truncated_seq

    ),
{%- endif %}

combined as (

    select * from applied
    {%- if with_truncates %}
        union all
        select * from truncated
    {%- endif %}

),

-- A full refresh writes live records only; an incremental run hands deletions to the merge.
final as (

    select
        *{{ ',' if incremental }}
        {%- if incremental %}
            record is null as is_deleted
        {%- endif %}
    from combined
    {%- if not incremental %}
        where record is not null
    {%- endif %}

)

select * from final
