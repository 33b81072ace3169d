with

frontier as (

    select * from {{ ref('stg_wal__frontier') }}

),

current_frontier as (

    {{ first_row_per_key('frontier', ['source_id'], 'frontier_batch_id desc') }}

)

select * from current_frontier
