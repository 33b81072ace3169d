-- Every version of every source record, from the change log: when it began and ended (seq and
-- commit time), and whether that version is a deletion. A version ends at the record's next touch,
-- or at a truncate of its table, whichever comes first.
with

sequin as (

    select * from {{ ref('sequin_events') }}

),

touches as (

    select
        source_id,
        source_schema,
        source_table,
        record_pk,
        seq,
        commit_lsn,
        commit_idx,
        committed_at,
        action,
        record,
        old_record_pk as moved_from_pk

    from sequin
    where action in ('insert', 'update', 'delete', 'read')

    union all

    -- An update that changed the primary key ends the old key's record.
    select
        source_id,
        source_schema,
        source_table,
        old_record_pk as record_pk,
        seq,
        commit_lsn,
        commit_idx,
        committed_at,
        'delete' as action,
        {{ null_record() }} as record,
        cast(null as string) as moved_from_pk

    from sequin
    where {{ is_key_change() }}

),

truncates as (

    select
        source_id,
        source_schema,
        source_table,
        seq,
        committed_at
    from sequin
    where action = 'truncate'

),

versions as (

    select
        touches.*,
        {{ fold_record(
            "collect_list(struct(seq, action, record, " ~ null_record() ~ " as base)) over (
                partition by source_id, source_schema, source_table, record_pk
                order by seq
                rows between unbounded preceding and current row
            )",
            null_record()
        ) }} as full_record,
        lead(touches.seq) over (
            partition by touches.source_id, touches.source_schema, touches.source_table, touches.record_pk
            order by touches.seq
        ) as next_touch_seq,
        lead(touches.committed_at) over (
            partition by touches.source_id, touches.source_schema, touches.source_table, touches.record_pk
            order by touches.seq
        ) as next_touch_at

    from touches

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
        moved_from_pk,
        coalesce(full_record, record) as record

    from ended

)

select * from final
