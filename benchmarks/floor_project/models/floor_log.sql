-- The landed lines that are changes, appended as they come: no dedup, no numbering.
{{ config(materialized='incremental', incremental_strategy='append') }}

select
    batch,
    `table` as tbl,
    action,
    cast(conv(split(lsn, '/')[0], 16, 10) as bigint) * 4294967296
    + cast(conv(split(lsn, '/')[1], 16, 10) as bigint) as pos,
    coalesce(
        filter(columns, c -> c.name = 'id')[0].value, filter(identity, c -> c.name = 'id')[0].value
    ) as id,
    columns
from {{ var('floor_events') }}
where
    action in ('I', 'U', 'D')
    {% if is_incremental() %}
        and batch > (select max(batch) from {{ this }})
    {% endif %}
