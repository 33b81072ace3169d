{#-
    Applies the changes of sequin_events with seq in (consumed, upto] to every subscribed consumer.

    sequin + consumers -> subscribed -> truncates
                          subscribed -> touches -> live_touches (minus what a truncate voided)
    this (+ truncates) -> existing -> starting_records
    live_touches -> moves -> moved_from_touches -> moved_bases        (only when a key moved)
    live_touches + moved_bases -> touches_with_bases
    touches_with_bases + starting_records -> flattened (fold in seq order) -> applied
    existing, untouched since a truncate of its table -> truncated
    applied + truncated -> combined -> final
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['consumer_name', 'source_id', 'source_schema', 'source_table', 'record_pk'],
        merge_delete_column='is_deleted',
        on_schema_change='ignore',
        post_hook="{{ unstamp_consumed_seq() }}",
    )
}}
{#-
    on_schema_change 'ignore': an incremental run selects `is_deleted`, a helper the merge reads and
    never writes, so the select never matches the table's columns ('fail' would always fail and
    'append_new_columns' would add it). A change of the written columns takes a full refresh.
-#}
{%- set table_key = ['consumer_name', 'source_id', 'source_schema', 'source_table'] -%}
{%- set record_key = table_key + ['record_pk'] -%}
{%- set bounds = consumer_run_bounds(this, ref('sequin_events')) -%}
{#-
    `upto` rides on the model's own Delta commit (its merge or create), so the next run starts
    exactly where this one ended, even when its last touches were deletes; the post-hook clears the
    mark. Only a run that writes stamps: not a compile, not a unit test.
-#}
{%- if execute and flags.WHICH in ('run', 'build') and model.resource_type == 'model' -%}
    {%- do run_query(stamp_consumed_seq(bounds.upto)) -%}
{%- endif -%}
{#-
    A few key moves are broadcast, so only the touches of moved-from keys are shuffled; a mass
    re-key falls back to a shuffle join.
-#}
{%- set broadcast_moves = bounds.key_moves <= var('wal_lake_broadcast_key_moves', 200000) | int %}

with

sequin as (

    select * from {{ ref('sequin_events') }}
    where seq > {{ bounds.consumed }} and seq <= {{ bounds.upto }}

),

consumers as (

    select * from {{ ref('consumers') }}

),

subscribed as (

    select
        consumers.consumer_name,
        sequin.*

    from sequin
    inner join consumers
        on {{ table_matches('sequin.source_schema', 'sequin.source_table', 'consumers.table_pattern') }}
    where sequin.action != 'message'

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

-- Every touch of a record key. An update that changed the primary key also deletes the old key.
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

    {% if is_incremental() -%}
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

    moves as (

        select
            consumer_name,
            source_id,
            source_schema,
            source_table,
            record_pk,
            old_record_pk as moved_from_pk,
            seq

        from live_touches
        where {{ is_key_change() }}

    ),

    -- The touches of keys an update moved a row away from: the only ones a moved row's base comes from.
    moved_from_touches as (

        select {% if broadcast_moves %}/*+ broadcast(moves) */ {% endif %}live_touches.*
        from live_touches
        left semi join moves
            on
                {{ columns_equal('live_touches', 'moves', table_key) }}
                and live_touches.record_pk = moves.moved_from_pk

    ),

    -- The old key's record as of just before an update moved it to a new key: the new key's
    -- starting point for the columns the update left out.
    moved_bases as (

        select
            moves.consumer_name,
            moves.source_id,
            moves.source_schema,
            moves.source_table,
            moves.record_pk,
            moves.seq,
            {{ fold_record(
                "filter(
                    collect_list(struct(earlier.seq, earlier.action, earlier.record, " ~ null_record() ~ " as base)),
                    p -> p.seq is not null
                )",
                "first(starting_records.record, true)"
            ) }} as base

        from moves
        left join moved_from_touches as earlier
            on
                {{ columns_equal('moves', 'earlier', table_key) }}
                and moves.moved_from_pk = earlier.record_pk
                and earlier.seq < moves.seq
        left join starting_records
            on
                {{ columns_equal('moves', 'starting_records', table_key) }}
                and moves.moved_from_pk = starting_records.record_pk
        group by
            moves.consumer_name,
            moves.source_id,
            moves.source_schema,
            moves.source_table,
            moves.record_pk,
            moves.seq

    ),

    touches_with_bases as (

        select
            live_touches.*,
            moved_bases.base

        from live_touches
        left join moved_bases
            on
                {{ columns_equal('live_touches', 'moved_bases', record_key) }}
                and live_touches.seq = moved_bases.seq

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

    select *{% if not is_incremental() %} except (is_deleted){% endif %}
    from combined
    {%- if not is_incremental() %}
        where not is_deleted
    {%- endif %}

)

select * from final
