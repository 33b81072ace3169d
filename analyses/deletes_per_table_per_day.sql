-- How many rows were deleted per source table per day (commit time, UTC)?

select
    source_schema,
    source_table,
    to_date(committed_at) as commit_date,
    count(*) as delete_count

from {{ ref('sequin_events') }}
where action = 'delete'
group by source_schema, source_table, to_date(committed_at)
order by commit_date, source_schema, source_table
