-- Contract violations of the change log: a landed change at or below a position sequin_events has
-- already consumed that is not a replay of the change recorded there (no row at that position, or
-- a row that says something else). They never get a seq; the data test on this model fails while
-- any exist.
with

events as (

    select * from {{ ref('int_events_consumable') }}

),

sequin as (

    select * from {{ ref('sequin_events') }}

),

consumed as (

    select
        source_id,
        max(struct(commit_lsn, commit_idx)) as max_position

    from sequin
    group by source_id

),

candidates as (

    select events.*
    from events
    inner join consumed
        on events.source_id = consumed.source_id
    where struct(events.commit_lsn, events.commit_idx) <= consumed.max_position

),

violations as (

    select
        candidates.source_id,
        candidates.commit_lsn,
        {{ lsn_to_text('candidates.commit_lsn') }} as commit_lsn_text,
        candidates.commit_idx,
        candidates.action,
        candidates.source_schema,
        candidates.source_table,
        candidates.record_pk,
        candidates.landing_file,
        candidates.landing_line,
        candidates.batch_id,
        candidates.ingested_at,
        case
            when sequin.seq is null then 'arrived below the consumed position'
            else 'differs from the change already recorded at this position'
        end as reason

    from candidates
    left join sequin
        on
            candidates.source_id = sequin.source_id
            and candidates.commit_lsn = sequin.commit_lsn
            and candidates.commit_idx = sequin.commit_idx
    where sequin.seq is null or candidates.change_hash != sequin.change_hash

)

select * from violations
