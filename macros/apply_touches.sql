{#-
    The select that applies the changes of `sequin_relation` with seq in (bounds.consumed,
    bounds.upto] (`consumer_run_bounds`) to the records a model already holds (`relation`, when
    `incremental`): one row per record key, folded in seq order with the rules of the contract
    (delete wins, a truncate voids what came before it, a key move ends the old key and carries its
    record, a column left out keeps its value).

    sequin -> flattenable (keyed rows, truncates) -> touched_tables (+ subscriptions) -> subscribed_tables
    flattenable + subscribed_tables -> subscribed -> truncates
                                       subscribed -> touches -> live_touches (minus what a truncate voided)
    this (+ truncates) -> existing -> starting_records
    live_touches + starting_records -> key_move_bases -> move_bases   (only when a key moved)
    live_touches + move_bases -> touches_with_bases
    touches_with_bases + starting_records -> flattened (fold in seq order) -> applied
    existing, untouched since a truncate of its table -> truncated
    applied + truncated -> combined -> final

    - `subscriptions_relation`: the consumers and their table patterns (int_consumer_subscriptions):
      one record set per consumer, keyed by consumer_name first. None: one record set per source,
      every table applied (source_records).
    - `tombstones`: an incremental run writes a deleted or truncated record as a row (record null,
      is_deleted true, the seq of the change that removed it) instead of handing it to the merge to
      delete, so a model reading this one by seq sees removals too. A full refresh writes live
      records only, with is_deleted false.
-#}
{% macro apply_touches(bounds, sequin_relation, subscriptions_relation, relation, incremental, tombstones=false) -%}
{%- set per_consumer = subscriptions_relation is not none -%}
{%- set table_key = (['consumer_name'] if per_consumer else []) + ['source_id', 'source_schema', 'source_table'] -%}
{%- set record_key = table_key + ['record_pk'] -%}
{#-
    A few key moves are broadcast, so only the touches of moved-from keys are shuffled; a mass
    re-key falls back to a shuffle join.
-#}
{%- set broadcast_moves = bounds.key_moves <= var('wal_lake_broadcast_key_moves', 200000) | int %}
{#- Chains of moves (a row moved twice) resolve in one pass when listed, by recursion otherwise. #}
{%- set chains = bounds.get('key_move_chains') %}

with{% if bounds.key_moves and chains is none %} recursive{% endif %}

sequin as (

    select * from {{ sequin_relation }}
    where seq > {{ bounds.consumed }} and seq <= {{ bounds.upto }}

),

{%- if per_consumer %}

subscriptions as (

    select * from {{ subscriptions_relation }}

),
{%- endif %}

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

{%- if per_consumer %}

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
{%- else %}

-- One record set per source: every table is applied.
subscribed as (

    select * from flattenable

),
{%- endif %}

truncates as (

    select
        {{ table_key | join(',\n        ') }},
        max(seq) as truncated_seq

    from subscribed
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

    from subscribed
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
            {%- if tombstones %}
            cast(null as boolean) as is_deleted,
            {%- endif %}
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
        {%- if tombstones %}
        -- A tombstone at the truncate's seq, so what reads this table's changes by seq sees it.
        existing.truncated_seq as seq,
        {%- else %}
        existing.seq,
        {%- endif %}
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
        {%- if tombstones %}
            and not existing.is_deleted
        {%- endif %}

),

combined as (

    select * from applied
    union all
    select * from truncated

),

-- A full refresh writes live records only; an incremental run hands deletions to the merge (or,
-- with `tombstones`, writes them as rows).
final as (

    select *{% if not incremental and not tombstones %} except (is_deleted){% endif %}
    from combined
    {%- if not incremental %}
        where not is_deleted
    {%- endif %}

)

select * from final
{%- endmacro %}
