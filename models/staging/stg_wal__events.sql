with

source as (

    select * from {{ source('wal', 'wal_events') }}

),

renamed as (

    select
        cast(source_id as string) as source_id,
        cast(commit_lsn as bigint) as commit_lsn,
        cast(commit_idx as int) as commit_idx,
        cast(change_lsn as bigint) as change_lsn,
        cast(xid as bigint) as xid,
        cast(committed_at as timestamp) as committed_at,
        cast(action as string) as action,
        cast(source_schema as string) as source_schema,
        cast(source_table as string) as source_table,
        key_columns,
        cast(record_pk as string) as record_pk,
        record,
        changes,
        cast(old_record_pk as string) as old_record_pk,
        old_identity,
        column_types,
        cast(source_format as string) as source_format,
        cast(landing_file as string) as landing_file,
        cast(landing_line as bigint) as landing_line,
        cast(batch_id as bigint) as batch_id,
        cast(ingested_at as timestamp) as ingested_at

    from source

)

select * from renamed
