with

source as (

    select * from {{ source('wal', 'wal_rejects') }}

),

renamed as (

    select
        cast(source_id as string) as source_id,
        cast(landing_file as string) as landing_file,
        cast(landing_line as bigint) as landing_line,
        cast(raw_line as string) as raw_line,
        cast(reason as string) as reason,
        cast(batch_id as bigint) as batch_id,
        cast(ingested_at as timestamp) as ingested_at

    from source

)

select * from renamed
