{#-
    Every version of every source record, from its touches (int_record_touches): when it began and
    ended (seq and commit time), and whether that version is a deletion. Changes of tables without
    a key have no record to version: they stay in sequin_events (keyless_changes counts them).

    touches (int_record_touches) -> move_bases (`key_move_bases`; only when a key ever moved)
    touches + move_bases -> touches_with_bases
    touches_with_bases -> versions (each touch's full record, folded up to it; the next touch)
    versions + truncates (sequin_events) -> ended (the next truncate of its table) -> final

    A version ends at the record's next touch, or at a truncate of its table, whichever comes first.
    Its record is the fold of the record's touches up to it, in seq order (`fold_record`): an insert
    or read replaces the row, a delete removes it, an update overlays the columns it sent, over the
    moved row's record (`base`) when it moved one from another key.
-#}
{%- set table_key = ['source_id', 'source_schema', 'source_table'] -%}
{%- set key_moves = count_key_moves(ref('sequin_events')) %}
{%- set chains = key_move_chains(ref('sequin_events')) if key_moves else [] %}

with{% if key_moves and chains is none %} recursive{% endif %}

touches as (

    select * from {{ ref('int_record_touches') }}

),

truncates as (

    select
        source_id,
        source_schema,
        source_table,
        seq,
        committed_at
    from {{ ref('sequin_events') }}
    where action = 'truncate'

),
{%- if key_moves %}

    {{ key_move_bases('touches', none, table_key, broadcast=false, chains=chains) }},

    touches_with_bases as (

        select
            touches.*,
            move_bases.base

        from touches
        left join move_bases
            on
                {{ columns_equal('touches', 'move_bases', table_key + ['record_pk', 'seq']) }}

    ),
{%- else %}

    -- No change moved a row to a new key: no touch has another key's record to start from.
    touches_with_bases as (

        select
            touches.*,
            {{ null_record() }} as base

        from touches

    ),
{%- endif %}

versions as (

    select
        touches_with_bases.*,
        {{ fold_record(
            "collect_list(struct(seq, action, record, base)) over (
                partition by source_id, source_schema, source_table, record_pk
                order by seq
                rows between unbounded preceding and current row
            )",
            null_record()
        ) }} as full_record,
        lead(touches_with_bases.seq) over (
            partition by
                touches_with_bases.source_id,
                touches_with_bases.source_schema,
                touches_with_bases.source_table,
                touches_with_bases.record_pk
            order by touches_with_bases.seq
        ) as next_touch_seq,
        lead(touches_with_bases.committed_at) over (
            partition by
                touches_with_bases.source_id,
                touches_with_bases.source_schema,
                touches_with_bases.source_table,
                touches_with_bases.record_pk
            order by touches_with_bases.seq
        ) as next_touch_at

    from touches_with_bases

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

final as (

    select
        source_id,
        source_schema,
        source_table,
        record_pk,
        seq as valid_from_seq,
        case
            when next_truncate_seq is not null and (next_touch_seq is null or next_truncate_seq < next_touch_seq)
                then next_truncate_seq
            else next_touch_seq
        end as valid_to_seq,
        committed_at as valid_from,
        case
            when next_truncate_seq is not null and (next_touch_seq is null or next_truncate_seq < next_touch_seq)
                then next_truncate_at
            else next_touch_at
        end as valid_to,
        commit_lsn,
        {{ lsn_to_text('commit_lsn') }} as commit_lsn_text,
        commit_idx,
        action,
        action = 'delete' as is_deleted,
        old_record_pk as moved_from_pk,
        coalesce(full_record, record) as record

    from ended

)

select * from final
