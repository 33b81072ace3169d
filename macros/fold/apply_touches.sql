{#-
    The select that applies the changes of `sequin_relation` with seq in (bounds.consumed,
    bounds.upto] (`fold_run_bounds`) to the records a model already holds (`relation`, when
    `incremental`): one row per source record key, folded in seq order with the rules of the
    contract (delete wins, a truncate voids what came before it, a key move ends the old key and
    carries its record, a column left out keeps its value). source_records is its one caller.

    sequin -> flattenable (keyed rows, truncates) -> truncates
              flattenable -> touches -> live_touches (minus what a truncate voided)
    this (+ truncates) -> existing -> starting_records
    live_touches + starting_records -> key_move_bases -> move_bases   (only when a key moved)
    live_touches + move_bases -> touches_with_bases
    touches_with_bases + starting_records -> flattened (fold in seq order) -> applied
    existing, untouched since a truncate of its table -> truncated
    applied + truncated -> combined -> final

    An incremental run writes a deleted or truncated record as a row (a tombstone: record null,
    is_deleted true, the seq of the change that removed it), so a model reading this one by seq
    sees removals too. A full refresh writes live records only, with is_deleted false.
-#}
{% macro apply_touches(bounds, sequin_relation, relation, incremental) -%}
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
{#- Chains of moves (a row moved twice) resolve in one pass when listed, by recursion otherwise. #}
{%- set chains = bounds.get('key_move_chains') %}

with{% if bounds.key_moves and chains is none %} recursive{% endif %}

sequin as (

    select * from {{ sequin_relation }}
    where seq > {{ bounds.consumed }} and seq <= {{ bounds.upto }}

),

-- Changes of a table without a key (null record_pk) have no record to flatten on: they stay in
-- sequin_events, counted by keyless_changes. Truncates apply to every table.
flattenable as (

    select *
    from sequin
    where record_pk is not null or action = 'truncate'

),

truncates as (

    select
        {{ table_key | join(',\n        ') }},
        max(seq) as truncated_seq

    from flattenable
    where action = 'truncate'
    group by {{ table_key | join(', ') }}

),

-- Every touch of a record key. A change that moved a row to a new key also deletes the old key.
touches as (

    select
        {{ table_key | join(',\n        ') }},
        record_pk,
        old_record_pk,
        seq,
        commit_lsn,
        commit_idx,
        committed_at,
        action,
        record

    from flattenable
    where action in ('insert', 'update', 'delete', 'read')
    {%- if bounds.key_moves %}

        union all

        select
            {{ table_key | join(',\n            ') }},
            old_record_pk as record_pk,
            cast(null as string) as old_record_pk,
            seq,
            commit_lsn,
            commit_idx,
            committed_at,
            'delete' as action,
            {{ null_record() }} as record

        from flattenable
        where {{ is_key_change() }}
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
    where truncates.truncated_seq is null or touches.seq > truncates.truncated_seq

),

existing as (

    {% if incremental -%}
        select /*+ broadcast(truncates) */
            existing_records.*,
            truncates.truncated_seq

        from {{ relation }} as existing_records
        left join truncates
            on
                {{ columns_equal('existing_records', 'truncates', table_key) }}
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
        record is null as is_deleted

    from flattened

),

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

combined as (

    select * from applied
    union all
    select * from truncated

),

-- A full refresh writes live records only; an incremental run writes removals as tombstones.
final as (

    select * from combined
    {%- if not incremental %}
        where not is_deleted
    {%- endif %}

)

select * from final
{%- endmacro %}
