-- The landed changes the models may consume: those of batches at or below each source's current
-- frontier. Changes landed past it wait, so a model never sees an earlier change arrive later.
with

events as (

    select * from {{ ref('stg_wal__events') }}

),

frontier as (

    select * from {{ ref('int_frontier_current') }}

),

consumable as (

    select
        events.*,
        -- Two landed rows at one position are the same change only if they say the same thing.
        {{ change_hash('events') }} as change_hash

    from events
    inner join frontier
        on events.source_id = frontier.source_id
    where
        events.batch_id <= frontier.frontier_batch_id
        and events.commit_lsn <= frontier.frontier_lsn

)

select * from consumable
