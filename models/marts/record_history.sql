{#-
    Every version of every source record, from its touches (int_record_touches): when it began and
    ended (seq and commit time), and whether that version is a deletion. Changes of tables without
    a key have no record to version: they stay in sequin_events (keyless_changes counts them).

    Built a seq range (consumed, upto] at a time, like source_records: a run reads only the touches
    after what it already holds, and merges the versions they begin plus the held versions they end.

    touches (int_record_touches, seq in (consumed, upto]) + truncates (sequin_events, same range)
    this (its current versions), for the keys touched -> held
    held -> starting_records (each key's latest version: its fold's start)
         -> move_starting_records (its latest live version: a move's base)
    touches + move_starting_records -> move_bases (`key_move_bases`; only when a key moved)
    touches + move_bases + starting_records -> touches_with_bases
    touches_with_bases -> ordered (the key's next touch) -> contributions (what each touch sets)
        -> with_carried_columns (the columns a version may take from an earlier touch)
        -> cells (one per touch and carried column) -> cells_carried (each one's latest value)
        -> versions (each touch's full record, folded up to it)
    versions + truncates -> ended (the next truncate of its table) -> new_versions
    held -> closed (the held versions this run ends, or that stop being current)
    new_versions + closed -> final (merged on the version's key, matching current versions only)

    A version ends at the record's next touch, or at a truncate of its table, whichever comes first.
    Its record is the fold of the record's touches up to it, in seq order, as `fold_record` folds
    them: an insert or read replaces the row, a delete removes it, an update overlays the columns it
    sent, over the moved row's record (`base`) when it moved one from another key. Here it is
    folded a column at a time, so its cost grows with the touches, not with their square. A
    truncate ends versions but does not reset the fold: what follows it starts from the record's
    last version, as a full rebuild folds it. A full refresh writes the same rows as the runs that
    built it a range at a time.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['source_id', 'source_schema', 'source_table', 'record_pk', 'valid_from_seq'],
        on_schema_change='fail',
        post_hook=["{{ stamp_unwritten_run() }}", "{{ unstamp_consumed_seq() }}"],
        meta={
            'wal_lake_reads_by_seq': {
                'reads': 'sequin_events', 'subscriptions': false, 'requires_column': 'is_current'
            }
        },
        tblproperties={'delta.enableDeletionVectors': 'true'},
        partition_by=['is_current'],
    )
}}
{#-
    A run ends a held version of each key it touches, and those versions lie in every file of the
    table: without deletion vectors, Delta's merge rewrites every such file whole, so each run
    copies the whole history (1M versions for a +10k on a 1M history). With them it marks the ended
    rows deleted and writes only the rows it changes. Set when the table is created
    (docs/operations.md).

    The versions a later run can build on or end (`is_current`: a record's latest version, and its
    latest version that is not a deletion) are kept in a partition of their own. A run reads and
    merges into that partition only, a few versions per record, however long the history behind
    them grows.
-#}
{%- set incremental = is_incremental() -%}
{#- Every touch stays a version: a truncate voids none of them, so chains are found across it. -#}
{%- set bounds = fold_run_bounds(this, ref('sequin_events'), incremental, truncates_void=false) -%}
{#- A run with nothing new reads no held version: it has none to end. -#}
{%- set reads_held = incremental and bounds.upto > bounds.consumed -%}
{#-
    `upto` rides on the model's own Delta commit, so the next run starts where this one ended; a
    run with no seq past the consumed one runs no merge.
-#}
{%- do stamp_run(bounds) -%}
{#- A version a run ends, or that stops being current, is current before it: the merge matches there alone. -#}
{%- do merge_target_predicate('DBT_INTERNAL_DEST.is_current' if reads_held else none) -%}
{%- set table_key = ['source_id', 'source_schema', 'source_table'] -%}
{%- set record_key = table_key + ['record_pk'] -%}
{%- set broadcast_moves = bounds.key_moves <= var('wal_lake_broadcast_key_moves', 200000) | int %}
{#-
    A run of a few changes broadcasts the keys it touches, so the held versions are found in one
    scan of the table, without shuffling it; a long catch-up joins them by shuffle instead.
-#}
{%- set broadcast_touched = bounds.upto - bounds.consumed <= var('wal_lake_broadcast_touched_keys', 200000) | int %}
{%- set chains = bounds.get('key_move_chains') %}

with{% if bounds.key_moves and chains is none %} recursive{% endif %}

touches as (

    select * from {{ ref('int_record_touches') }}
    where
        seq > {{ bounds.consumed }} and seq <= {{ bounds.upto }}
    {%- if reads_held %}
        -- Read by the first touches, the fold and the key-move steps: one scan (`computed_once`).
        and {{ computed_once() }}
    {%- endif %}

),

truncates as (

    select
        {{ table_key | join(',\n        ') }},
        seq,
        committed_at

    from {{ ref('sequin_events') }}
    where
        action = 'truncate'
        and seq > {{ bounds.consumed }}
        and seq <= {{ bounds.upto }}

),
{%- if reads_held %}

    -- Each key's first touch in this run, and each table's first truncate: what ends a held version.
    first_touches as (

        select
            {{ record_key | join(',\n            ') }},
            min(seq) as seq,
            min_by(committed_at, seq) as committed_at,
            -- The run brings the key a version that is not a deletion: its latest live one is then the run's.
            bool_or(action != 'delete') as touched_live

        from touches
        group by {{ record_key | join(', ') }}

    ),

    first_truncates as (

        select
            {{ table_key | join(',\n            ') }},
            min(seq) as seq,
            min_by(committed_at, seq) as committed_at

        from truncates
        group by {{ table_key | join(', ') }}

    ),

    -- The held versions this run reads, all current: those of a key it touches (its latest, where
    -- its fold starts, and its latest live one, a move's base), and the open versions of a table it
    -- truncates (which the truncate ends).
    held as (

        select /*+ broadcast({{ 'first_touches, ' if broadcast_touched }}first_truncates) */
            held_versions.*,
            first_touches.seq as next_touch_seq,
            first_touches.committed_at as next_touch_at,
            first_touches.touched_live,
            first_truncates.seq as next_truncate_seq,
            first_truncates.committed_at as next_truncate_at

        from {{ this }} as held_versions
        left join first_touches
            on
                {{ columns_equal('held_versions', 'first_touches', record_key) }}
        left join first_truncates
            on
                {{ columns_equal('held_versions', 'first_truncates', table_key) }}
        where
            held_versions.is_current
            and (
                first_touches.seq is not null
                or (first_truncates.seq is not null and held_versions.valid_to_seq is null)
            )
            -- Read by the starting records, the versions it closes and the key-move steps: one scan
            -- of the table, not two or three (`computed_once`).
            and {{ computed_once() }}

    ),

    -- A touched key's record before this run, where its fold goes on from: its latest version's
    -- (none after a deletion), whatever truncate ended it, as a full rebuild folds it.
    starting_records as (

        select
            {{ record_key | join(',\n            ') }},
            case when is_deleted then {{ null_record() }} else record end as record

        from held
        where next_touch_seq is not null
        qualify row_number() over (
            partition by {{ record_key | join(', ') }}
            order by valid_from_seq desc
        ) = 1

    ),
{%- endif %}
{%- if bounds.key_moves %}
    {%- if reads_held %}

        -- The record a key held before this run's deletions of it, for a move away from it:
        -- `key_move_bases` skips deletions (a Debezium key change deletes the old key first).
        move_starting_records as (

            select
                {{ record_key | join(',\n                ') }},
                record

            from held
            where next_touch_seq is not null and not is_deleted
            qualify row_number() over (
                partition by {{ record_key | join(', ') }}
                order by valid_from_seq desc
            ) = 1

        ),
    {%- endif %}

    {{ key_move_bases(
        'touches',
        'move_starting_records' if reads_held else none,
        table_key,
        broadcast=broadcast_moves,
        chains=chains
    ) }},
{%- endif %}

-- A moved row's base (none when no change in this run moved a row to a new key), and where the
-- record's fold starts.
touches_with_bases as (

    select
        touches.*,
        {{ 'move_bases.base' if bounds.key_moves else null_record() }} as base,
        {{ 'starting_records.record' if reads_held else null_record() }} as starting_record

    from touches
    {% if bounds.key_moves -%}
        left join move_bases
            on
                {{ columns_equal('touches', 'move_bases', record_key + ['seq']) }}
    {% endif -%}
    {% if reads_held -%}
        left join starting_records
            on
                {{ columns_equal('touches', 'starting_records', record_key) }}
    {% endif %}

),

-- Each touch's neighbours among its key's touches in the run.
ordered as (

    select
        touches_with_bases.*,
        lead(seq) over touch_order as next_touch_seq,
        lead(committed_at) over touch_order as next_touch_at,
        lag(seq) over touch_order is null as is_first_touch,
        -- The key's last touch in the run that is not a deletion. All over one sort.
        max(case when action != 'delete' then seq end) over (
            partition by {{ record_key | join(', ') }}
            order by seq
            rows between unbounded preceding and unbounded following
        ) as last_live_seq

    from touches_with_bases
    window touch_order as (partition by {{ record_key | join(', ') }} order by seq)

),

-- What each touch sets (`set_columns`). A touch that sets the whole record (`resets`: an insert or
-- read, a delete, a move laid over its base, and the key's first touch in the run, laid over its
-- starting record) is where the fold starts again; any other touch is an update that lays its
-- columns over the record before it.
contributions as (

    select
        *,
        case
            when action = 'delete' or record is null then {{ null_record() }}
            when base is not null then {{ overlay_record('base', 'record') }}
            when action in ('insert', 'read') then record
            when is_first_touch then {{ overlay_record('starting_record', 'record') }}
            else record
        end as set_columns,
        action in ('insert', 'read', 'delete') or record is null or base is not null or is_first_touch as resets

    from ordered

),

-- The columns a live touch of the key in the run leaves out and another sets: the only ones a
-- version may carry from an earlier touch. Each touch sets all the others itself. Most records
-- have none or one (a TOASTed value an update did not send).
with_carried_columns as (

    select
        *,
        collect_set(map_keys(set_columns)) over (
            partition by {{ record_key | join(', ') }}
        ) as live_column_sets

    from contributions

),

-- The fold of the carried columns, a column at a time: a cell per touch and carried column, set
-- by the touch, unset by a reset that does not set it, or left as it was (null). A column's
-- latest set or unset cell up to a touch is its value at that version. Linear in the touches,
-- where folding each version's whole prefix of touches would grow with their square. The touch's
-- own columns ride on its first cell.
cells as (

    select
        {{ record_key | join(',\n        ') }},
        seq,
        column_name,
        case
            when column_name is null then null
            when map_contains_key(set_columns, column_name)
                then named_struct('is_set', true, 'value', set_columns[column_name])
            when resets then named_struct('is_set', false, 'value', cast(null as string))
        end as cell,
        coalesce(column_position, 0) = 0 as is_first_cell,
        if(coalesce(column_position, 0) = 0, set_columns, null) as set_columns,
        if(coalesce(column_position, 0) = 0, record, null) as record,
        old_record_pk,
        commit_lsn,
        commit_idx,
        committed_at,
        action,
        next_touch_seq,
        next_touch_at,
        last_live_seq

    from with_carried_columns
        lateral view posexplode_outer(
            filter(
                array_distinct(flatten(live_column_sets)),
                name -> exists(live_column_sets, names -> not array_contains(names, name))
            )
        ) as column_position, column_name

),

cells_carried as (

    select
        *,
        last(cell, true) over (
            partition by {{ record_key | join(', ') }}, column_name
            order by seq
            rows between unbounded preceding and current row
        ) as latest_cell

    from cells

),

versions as (

    select
        {{ record_key | join(',\n        ') }},
        seq,
        old_record_pk,
        commit_lsn,
        commit_idx,
        committed_at,
        action,
        record,
        next_touch_seq,
        next_touch_at,
        last_live_seq,
        -- The record as of this touch: the columns it carries laid under the ones it sets, in
        -- name order (whatever runs folded it); none after a deletion (it sets nothing).
        case when set_columns is not null then map_from_entries(array_sort(map_entries(
            {{ overlay_record(
                "map_from_entries(collect_list(
                    if(latest_cell.is_set, struct(column_name, latest_cell.value), null)
                ) over (partition by " ~ record_key | join(', ') ~ ", seq))",
                'set_columns'
            ) }}
        ))) end as full_record

    from cells_carried
    qualify is_first_cell

),

ended as (

    select
        versions.*,
        truncates.seq as next_truncate_seq,
        truncates.committed_at as next_truncate_at

    from versions
    left join truncates
        on
            versions.source_id = truncates.source_id
            and versions.source_schema = truncates.source_schema
            and versions.source_table = truncates.source_table
            and versions.seq < truncates.seq
    qualify row_number() over (
        partition by versions.source_id, versions.source_schema, versions.source_table, versions.record_pk, versions.seq
        order by truncates.seq asc nulls last
    ) = 1

),

new_versions as (

    select
        source_id,
        source_schema,
        source_table,
        record_pk,
        seq as valid_from_seq,
        {{ version_end('seq') }} as valid_to_seq,
        committed_at as valid_from,
        {{ version_end('at') }} as valid_to,
        commit_lsn,
        {{ lsn_to_text('commit_lsn') }} as commit_lsn_text,
        commit_idx,
        action,
        action = 'delete' as is_deleted,
        old_record_pk as moved_from_pk,
        coalesce(full_record, record) as record,
        -- The key's latest version in the run, or its latest live one (none when the run only deletes).
        next_touch_seq is null or coalesce(seq = last_live_seq, false) as is_current

    from ended

),
{%- if reads_held %}

    -- The held versions this run changes. An open one ends at its key's first touch in it or its
    -- table's first truncate in it, whichever comes first (every seq of the run is after it). A
    -- touched key's held version stays current only while it is the latest live one: it is not a
    -- deletion, and the run brings no live version of the key.
    closed as (

        select
            source_id,
            source_schema,
            source_table,
            record_pk,
            valid_from_seq,
            case when valid_to_seq is null then {{ version_end('seq') }} else valid_to_seq end as valid_to_seq,
            valid_from,
            case when valid_to_seq is null then {{ version_end('at') }} else valid_to end as valid_to,
            commit_lsn,
            commit_lsn_text,
            commit_idx,
            action,
            is_deleted,
            moved_from_pk,
            record,
            next_touch_seq is null or not (is_deleted or touched_live) as is_current

        from held
        where
            valid_to_seq is null
            or (next_touch_seq is not null and (is_deleted or touched_live))

    ),
{%- endif %}

final as (

    select * from new_versions
    {%- if reads_held %}
        union all
        select * from closed
    {%- endif %}

)

select * from final
