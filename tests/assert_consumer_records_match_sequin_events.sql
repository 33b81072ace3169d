-- consumer_records must hold exactly the keys whose last touch in sequin_events (a truncate of the
-- table and a change that moved a row to a new key count as touches) is not a delete, each at that
-- touch's seq; and where that touch sent the whole row (an insert or snapshot read that moved no
-- row) the record must be that row. Changes of tables without a key have no record.
-- An independent derivation: it calls none of the models' macros (a glob is matched as a regular
-- expression here, as LIKE there; a key move is written out).
with

sequin as (

    select * from {{ ref('sequin_events') }}

),

subscriptions as (

    select * from {{ ref('int_consumer_subscriptions') }}

),

consumer_records as (

    select * from {{ ref('consumer_records') }}

),

subscribed as (

    select
        subscriptions.consumer_name,
        sequin.*

    from sequin
    inner join subscriptions
        on
            -- `*` is any run of characters, the rest is literal (quoted as \Q...\E).
            sequin.source_schema rlike concat('^\\Q', replace(subscriptions.schema_glob, '*', '\\E.*\\Q'), '\\E$')
            and sequin.source_table rlike concat('^\\Q', replace(subscriptions.table_glob, '*', '\\E.*\\Q'), '\\E$')

),

key_touches as (

    select
        consumer_name,
        source_id,
        source_schema,
        source_table,
        record_pk,
        seq,
        action,
        record,
        old_record_pk
    from subscribed
    where action in ('insert', 'update', 'delete', 'read') and record_pk is not null

    union all

    select
        consumer_name,
        source_id,
        source_schema,
        source_table,
        old_record_pk as record_pk,
        seq,
        'delete' as action,
        -- sqlfluff's sparksql reads `map<` as a comparison.
        cast(null as map<string, string>) as record,  -- noqa: LT01
        cast(null as string) as old_record_pk

    from subscribed
    where old_record_pk is not null and old_record_pk != record_pk

),

last_touches as (

    select *
    from key_touches
    qualify row_number() over (
        partition by consumer_name, source_id, source_schema, source_table, record_pk
        order by seq desc, case when action = 'delete' then 0 else 1 end
    ) = 1

),

last_truncates as (

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

expected as (

    select last_touches.*
    from last_touches
    left join last_truncates
        on
            last_touches.consumer_name = last_truncates.consumer_name
            and last_touches.source_id = last_truncates.source_id
            and last_touches.source_schema = last_truncates.source_schema
            and last_touches.source_table = last_truncates.source_table
    where
        last_touches.action != 'delete'
        and (last_truncates.truncated_seq is null or last_touches.seq > last_truncates.truncated_seq)

),

validation_errors as (

    select
        coalesce(expected.consumer_name, consumer_records.consumer_name) as consumer_name,
        coalesce(expected.source_id, consumer_records.source_id) as source_id,
        coalesce(expected.source_schema, consumer_records.source_schema) as source_schema,
        coalesce(expected.source_table, consumer_records.source_table) as source_table,
        coalesce(expected.record_pk, consumer_records.record_pk) as record_pk,
        expected.seq as expected_seq,
        consumer_records.seq as actual_seq

    from expected
    full outer join consumer_records
        on
            expected.consumer_name = consumer_records.consumer_name
            and expected.source_id = consumer_records.source_id
            and expected.source_schema = consumer_records.source_schema
            and expected.source_table = consumer_records.source_table
            and expected.record_pk = consumer_records.record_pk
    where
        expected.seq is null
        or consumer_records.seq is null
        or expected.seq != consumer_records.seq
        or (
            expected.action in ('insert', 'read')
            and expected.old_record_pk is null
            and array_sort(map_entries(expected.record)) != array_sort(map_entries(consumer_records.record))
        )

)

select * from validation_errors
