-- How far behind the source does ingestion run, and how many lines were rejected and why?
-- One row per source (lag of commit time to landing time), then one row per source and reject reason.

with

lag_per_source as (

    select
        source_id,
        count(*) as change_count,
        min(committed_at) as first_committed_at,
        max(committed_at) as last_committed_at,
        max(ingested_at) as last_ingested_at,
        avg(unix_timestamp(ingested_at) - unix_timestamp(committed_at)) as avg_lag_seconds,
        max(unix_timestamp(ingested_at) - unix_timestamp(committed_at)) as max_lag_seconds

    from {{ ref('sequin_events') }}
    group by source_id

),

rejects_per_reason as (

    select
        source_id,
        reason,
        count(*) as rejected_lines

    from {{ ref('stg_wal__rejects') }}
    group by source_id, reason

),

final as (

    select
        lag_per_source.source_id,
        lag_per_source.change_count,
        lag_per_source.last_committed_at,
        lag_per_source.last_ingested_at,
        lag_per_source.avg_lag_seconds,
        lag_per_source.max_lag_seconds,
        rejects_per_reason.reason as reject_reason,
        coalesce(rejects_per_reason.rejected_lines, 0) as rejected_lines

    from lag_per_source
    full outer join rejects_per_reason
        on lag_per_source.source_id = rejects_per_reason.source_id

)

select * from final
order by source_id, reject_reason
