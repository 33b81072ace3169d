-- Changes that consumer_records and record_history cannot flatten: row changes landed with a null
-- record_pk. Mostly tables without a primary key (REPLICA IDENTITY FULL or NOTHING); also a change
-- of a keyed table whose replica identity (an index without the key columns) did not carry its
-- key. They stay in sequin_events, in order; this counts them per table so that their absence
-- downstream is seen.
with

sequin as (

    select * from {{ ref('sequin_events') }}

),

keyless as (

    select
        *,
        case
            when key_columns is null or size(key_columns) = 0 then 'table without a primary key'
            else 'key not in the change'
        end as reason

    from sequin
    where record_pk is null and action in ('insert', 'update', 'delete', 'read')

),

final as (

    select
        source_id,
        source_schema,
        source_table,
        reason,
        count(*) as change_count,
        count_if(action = 'insert') as insert_count,
        count_if(action = 'update') as update_count,
        count_if(action = 'delete') as delete_count,
        count_if(action = 'read') as read_count,
        min(seq) as first_seq,
        max(seq) as last_seq,
        max(committed_at) as last_committed_at

    from keyless
    group by source_id, source_schema, source_table, reason

)

select * from final
