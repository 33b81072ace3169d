-- Changes that consumer_records and record_history cannot flatten: row changes of tables without a
-- primary key (REPLICA IDENTITY FULL or NOTHING), landed with a null record_pk. They stay in
-- sequin_events, in order; this counts them per table so that their absence downstream is seen.
with

sequin as (

    select * from {{ ref('sequin_events') }}

),

keyless as (

    select *
    from sequin
    where record_pk is null and action in ('insert', 'update', 'delete', 'read')

),

final as (

    select
        source_id,
        source_schema,
        source_table,
        count(*) as change_count,
        count_if(action = 'insert') as insert_count,
        count_if(action = 'update') as update_count,
        count_if(action = 'delete') as delete_count,
        count_if(action = 'read') as read_count,
        min(seq) as first_seq,
        max(seq) as last_seq,
        max(committed_at) as last_committed_at

    from keyless
    group by source_id, source_schema, source_table

)

select * from final
