-- The latest touch of each record in the new batches, merged on the record's key.
{{ config(materialized='incremental', incremental_strategy='merge', unique_key=['tbl', 'id']) }}

select
    tbl,
    id,
    max(batch) as batch,
    max_by(action, pos) as action,
    max_by(columns, pos) as columns
from {{ ref('floor_log') }}
{% if is_incremental() %}
    where batch > (select max(batch) from {{ this }})
{% endif %}
group by tbl, id
