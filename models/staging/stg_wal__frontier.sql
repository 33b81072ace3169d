with

source as (

    select * from {{ source('wal', 'wal_frontier') }}

),

renamed as (

    select
        cast(source_id as string) as source_id,
        cast(frontier_lsn as bigint) as frontier_lsn,
        cast(batch_id as bigint) as frontier_batch_id,
        cast(updated_at as timestamp) as updated_at

    from source

)

select * from renamed
