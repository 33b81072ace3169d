{#-
    One row per source record, for every captured table whatever the consumers subscribe to: the
    record as of its last touch, folded from the touches (int_record_touches) by the contract's
    rules. This is the one fold of the project: consumer_records projects it onto each consumer's
    tables, and the typed mirrors and mirror_rejects read it by seq.

    touches (int_record_touches, seq in (consumed, upto]) + truncates (sequin_events, same range)
      -> live_touches (minus what a truncate voided)
    this (+ truncates) -> existing -> starting_records
    live_touches + starting_records -> move_bases (`key_move_bases`; only when a key moved)
    live_touches + move_bases -> touches_with_bases
    touches_with_bases + starting_records -> flattened (fold in seq order) -> applied
    existing, untouched since a truncate of its table -> truncated
    applied + truncated -> combined -> final

    An incremental run with no truncate (the common one) reads of `existing` only the keys a row
    moved away from, none when no key moved: it folds every other key's touches from nothing, and
    its merge lays a key's fold over the stored record when all its touches are updates
    (`lays_over_stored`, `merge_update_expressions`). Same records, with the table read once in
    full (by the merge) instead of twice.

    The rules: the last touch in seq order wins; a delete removes the record; a truncate voids
    every touch of its table before it; a key move ends the old key (a delete touch) and carries
    the old key's record to the new one (`base`); a column an update leaves out keeps its value
    (`fold_record`). A record that a delete, a key move or a truncate removed stays as a row (a
    tombstone: record null, is_deleted true, the seq of the change that removed it), so that a model
    applying the changes since its last run sees the removals too. A full refresh writes live
    records only.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['source_id', 'source_schema', 'source_table', 'record_pk'],
        on_schema_change='ignore',
        post_hook=["{{ stamp_unwritten_run() }}", "{{ unstamp_consumed_seq() }}"],
        meta={'wal_lake_reads_by_seq': {'reads': 'sequin_events', 'subscriptions': false}},
    )
}}
{#-
    on_schema_change 'ignore': a run laid over the stored records selects `lays_over_stored`, a
    helper the merge reads and never writes ('fail' would fail such runs). A change of the written
    columns takes a full refresh.
-#}
{%- set incremental = is_incremental() -%}
{%- set bounds = fold_run_bounds(this, ref('sequin_events'), incremental) -%}
{#-
    `upto` rides on the model's own Delta commit (its merge or create), so the next run starts
    exactly where this one ended, even when its last touches were deletes, and the models reading
    it by seq read it back; the post-hook clears the mark. A run with no seq past the consumed
    one runs no merge.
-#}
{%- do stamp_run(bounds) -%}
{%- set table_key = ['source_id', 'source_schema', 'source_table'] -%}
{%- set record_key = table_key + ['record_pk'] -%}
{#-
    A few key moves are broadcast, so only the touches of moved-from keys are shuffled; a mass
    re-key falls back to a shuffle join.
-#}
{%- set broadcast_moves = bounds.key_moves <= var('wal_lake_broadcast_key_moves', 200000) | int %}
{#-
    Each move's base (a whole record) is broadcast too when there are few enough, so the touches
    shuffle once, by record key, for the fold.
-#}
{%- set broadcast_bases = bounds.key_moves <= var('wal_lake_broadcast_move_bases', 100000) | int %}
{#-
    A long run with key moves (a full build, a catch-up) computes its touches once with a shuffle
    of its own: by record key, so that the fold need not shuffle them again. A short run's are
    few; it keeps Spark's default shuffle for them.
-#}
{%- set distribute_touches = bounds.key_moves
    and bounds.upto - bounds.consumed > var('wal_lake_touches_by_key_above', 100000) | int %}
{#- Chains of moves (a row moved twice) resolve in one pass when listed, by recursion otherwise. #}
{%- set chains = bounds.get('key_move_chains') %}
{#-
    No truncate in the run and few key moves: the fold reads of this table only the records of the
    keys a row moved away from (a move's base starts there), and starts every other key from
    nothing. The merge lays a key's fold over its stored record when the run sent only updates of
    it (`lays_over_stored`). Bounds that do not say how many truncates (a unit test's) take the
    full path.
-#}
{%- set over_stored = incremental and broadcast_moves and not bounds.get('truncates', 1) %}
{%- do merge_update_expressions({
    'record': 'case when DBT_INTERNAL_SOURCE.lays_over_stored then '
        ~ overlay_record('DBT_INTERNAL_DEST.record', 'DBT_INTERNAL_SOURCE.record')
        ~ ' else DBT_INTERNAL_SOURCE.record end',
} if over_stored else none) -%}

with{% if bounds.key_moves and chains is none %} recursive{% endif %}

touches as (

    select * from {{ ref('int_record_touches') }}
    where seq > {{ bounds.consumed }} and seq <= {{ bounds.upto }}

),

truncates as (

    {% if bounds.get('truncates', 1) -%}
        select
            {{ table_key | join(',\n            ') }},
            max(seq) as truncated_seq

        from {{ ref('sequin_events') }}
        where
            action = 'truncate'
            and seq > {{ bounds.consumed }}
            and seq <= {{ bounds.upto }}
        group by {{ table_key | join(', ') }}
    {%- else -%}
        -- fold_run_bounds counted no truncate in the range: no scan for one.
        select
            {%- for column in table_key %}
                cast(null as string) as {{ column }},
            {%- endfor %}
            cast(null as bigint) as truncated_seq
        where false
    {%- endif %}

),

-- A truncate voids every touch of its table before it. There is at most one truncates row per
-- table: broadcast, so the touches are not shuffled by table.
live_touches as (

    select /*+ broadcast(truncates) */ touches.*
    from touches
    left join truncates
        on
            {{ columns_equal('touches', 'truncates', table_key) }}
    where
        (truncates.truncated_seq is null or touches.seq > truncates.truncated_seq)
    {%- if bounds.key_moves %}
        -- The key-move steps read these touches four times more: one scan, not five.
        and {{ computed_once() }}
    {%- endif %}
    {%- if distribute_touches %}
    -- Computed once, they are shuffled once, by record key as the fold groups them: the fold
    -- reads them where they are instead of shuffling them again.
    distribute by touches.{{ record_key | join(', touches.') }}
    {%- endif %}

),

existing as (

    {% if incremental and not over_stored -%}
        select /*+ broadcast(truncates) */
            existing_records.*,
            truncates.truncated_seq

        from {{ this }} as existing_records
        left join truncates
            on
                {{ columns_equal('existing_records', 'truncates', table_key) }}
    {%- elif over_stored and bounds.key_moves -%}
        -- Only the keys a row moved away from: a move's base starts from their stored record. (A
        -- semi join keeps each stored record once whatever repeats: no distinct, no shuffle for it.)
        select /*+ broadcast(moved_from) */
            existing_records.*,
            cast(null as bigint) as truncated_seq

        from {{ this }} as existing_records
        left semi join (
            select
                {{ table_key | join(',\n                ') }},
                old_record_pk as record_pk
            from live_touches
            where {{ is_key_change() }}
        ) as moved_from
            on
                {{ columns_equal('existing_records', 'moved_from', record_key) }}
    {%- else -%}
        select
            {%- for column in table_key %}
                cast(null as string) as {{ column }},
            {%- endfor %}
            cast(null as string) as record_pk,
            {{ null_record() }} as record,
            cast(null as bigint) as seq,
            cast(null as bigint) as commit_lsn,
            cast(null as string) as commit_lsn_text,
            cast(null as int) as commit_idx,
            cast(null as timestamp) as committed_at,
            cast(null as string) as action,
            cast(null as boolean) as is_deleted,
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

    -- A key move carries the old key's last record before it (`base`): its last whole-row touch or
    -- starting record, or what an earlier move brought there, with the updates since laid over.
    {{ key_move_bases(
        'live_touches', 'starting_records', table_key, broadcast=broadcast_moves, chains=chains
    ) }},

    touches_with_bases as (

        select {% if broadcast_bases %}/*+ broadcast(move_bases) */ {% endif %}
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
        {%- for column in record_key %}
            touches_with_bases.{{ column }},
        {%- endfor %}
        -- In seq order from the starting record: an insert or read replaces it, a delete removes it,
        -- an update overlays the columns it sent (over the moved row's base, when it moved one).
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
        ) as last_touch{% if over_stored %},
        -- Only updates, each with a record, no base and no stored record read: the merge lays the
        -- fold over the stored record.
        bool_and(
            touches_with_bases.action = 'update'
            and touches_with_bases.record is not null
            and touches_with_bases.base is null
        )
        and count(starting_records.record_pk) = 0 as lays_over_stored{% endif %}

    from touches_with_bases
    left join starting_records
        on
            {{ columns_equal('touches_with_bases', 'starting_records', record_key) }}
    group by
        touches_with_bases.{{ record_key | join(',\n        touches_with_bases.') }}

),

applied as (

    select
        {{ record_key | join(',\n        ') }},
        record,
        last_touch.seq as seq,
        last_touch.commit_lsn as commit_lsn,
        {{ lsn_to_text('last_touch.commit_lsn') }} as commit_lsn_text,
        last_touch.commit_idx as commit_idx,
        last_touch.committed_at as committed_at,
        last_touch.action as action,
        {%- if over_stored %}
            lays_over_stored,
        {%- endif %}
        record is null as is_deleted

    from flattened

),

{%- if not over_stored %}

-- Records a truncate in this run removed and no later touch brought back.
truncated as (

    select
        existing.{{ record_key | join(',\n        existing.') }},
        {{ null_record() }} as record,
        -- A tombstone at the truncate's seq, so what reads this table's changes by seq sees it.
        existing.truncated_seq as seq,
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
    where
        existing.seq < existing.truncated_seq
        and not existing.is_deleted

),
{%- endif %}

combined as (

    select * from applied
    {%- if not over_stored %}
        union all
        select * from truncated
    {%- endif %}

),

-- A full refresh writes live records only; an incremental run writes removals as tombstones.
final as (

    select * from combined
    {%- if not incremental %}
        where not is_deleted
    {%- endif %}

)

select * from final
