{#-
    Contract violations of the change log: a landed change at or below a position sequin_events has
    already consumed that is not a replay of the change recorded there (no row at that position, or
    a row that says something else). They never get a seq; the data test on this model fails while
    any exist.

    Built a batch range at a time: a run compares the changes of the batches sequin_events has read
    since this model's last run (per source, checked < batch_id <= consumed), and no others.
    sequin_events reads a source's batches in order and numbers every position above what it
    consumed, so once it has read a batch, each change of it is either the one recorded at its
    position (the same change_hash) or a violation; a change is never compared before that.

    int_events_consumable past the least batch checked -> landed
    landed, batches (checked, consumed] per source -> events -> positions
    sequin_events between the run's least and greatest commit_lsn -> logged
    logged at those positions -> recorded
    events + recorded (left join on the position) -> violations (merged on the landed line)
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['landing_file', 'landing_line'],
        on_schema_change='fail',
        post_hook=["{{ stamp_unwritten_run() }}", "{{ unstamp_consumed_seq() }}"],
        meta={'wal_lake_stamps_positions': true, 'wal_lake_checks_sequin': true},
    )
}}
{#-
    What this model checked (its mark; should_full_refresh rebuilds it when the mark is missing or
    names another sequin_events) and what sequin_events has read, after its run in this invocation.
-#}
{%- set checked = (checked_batches(this) or {}).get('batches', {}) if is_incremental() else {} -%}
{%- set consumed = consumed_positions(ref('sequin_events'), after_its_run=true) -%}
{%- set ranges = [] -%}
{%- set through = {} -%}
{%- do through.update(checked) -%}
{%- for row in consumed -%}
    {%- set after = checked.get(row.source_id, 0) | int -%}
    {%- if row.batch_id | int > after -%}
        {%- do ranges.append({'source_id': row.source_id, 'after': after, 'through': row.batch_id | int}) -%}
        {%- do through.update({row.source_id: row.batch_id | int}) -%}
    {%- endif -%}
{%- endfor -%}
{%- set lsn_bounds = checked_lsn_bounds(ref('int_events_consumable'), ranges) -%}
{#-
    A run of a few changes broadcasts their positions and the log's rows at them, so the log is
    not shuffled; a full build or a long catch-up joins them by shuffle instead (10M positions
    broadcast ran a 4 GB driver out of memory).
-#}
{%- set broadcast = lsn_bounds is not none
    and lsn_bounds.changes <= var('wal_lake_broadcast_checked_changes', 1000000) | int -%}
{%- do skip_merge_when(is_incremental() and not ranges) -%}
{#- Its mark on its merge's commit (or the full build's); nothing to check: no merge, no mark. -#}
{%- set mark = checked_mark(through, sequin_table_id(ref('sequin_events'))) -%}
{%- do mark_commits(mark if ranges or not is_incremental() else none) -%}

with

landed as (

    -- The least batch checked, as a literal, lets Delta's file statistics skip the history.
    select * from {{ ref('int_events_consumable') }}
    {%- if ranges %}
        where batch_id > {{ ranges | map(attribute='after') | min }}
    {%- endif %}

),

batch_ranges as (

    {{ batch_ranges_relation(ranges) }}

),

events as (

    -- batch_ranges, a handful of literal rows, is broadcast.
    select landed.*
    from landed
    inner join batch_ranges
        on
            landed.source_id = batch_ranges.source_id
            and landed.batch_id > batch_ranges.after_batch
            and landed.batch_id <= batch_ranges.through_batch

),

positions as (

    select distinct
        source_id,
        commit_lsn,
        commit_idx
    from events

),

logged as (

    -- The log between the run's least and greatest commit_lsn (literals: Delta's file statistics
    -- skip the rest of the log).
    select * from {{ ref('sequin_events') }}
    {%- if lsn_bounds %}
        where commit_lsn between {{ lsn_bounds.low }} and {{ lsn_bounds.high }}
    {%- endif %}

),

recorded as (

    -- The log's rows at the run's positions: their key and hash columns (a run of a few changes
    -- broadcasts its positions: nothing of the log shuffled).
    select {%- if broadcast %} /*+ broadcast(positions) */{% endif %}
        sequin.source_id,
        sequin.commit_lsn,
        sequin.commit_idx,
        sequin.seq,
        sequin.change_hash

    from logged as sequin
    left semi join positions
        on
            sequin.source_id = positions.source_id
            and sequin.commit_lsn = positions.commit_lsn
            and sequin.commit_idx = positions.commit_idx

),

violations as (

    select {%- if broadcast %} /*+ broadcast(recorded) */{% endif %}
        events.source_id,
        events.commit_lsn,
        {{ lsn_to_text('events.commit_lsn') }} as commit_lsn_text,
        events.commit_idx,
        events.action,
        events.source_schema,
        events.source_table,
        events.record_pk,
        events.landing_file,
        events.landing_line,
        events.batch_id,
        events.ingested_at,
        case
            when recorded.seq is null then 'arrived below the consumed position'
            else 'differs from the change already recorded at this position'
        end as reason

    from events
    left join recorded
        on
            events.source_id = recorded.source_id
            and events.commit_lsn = recorded.commit_lsn
            and events.commit_idx = recorded.commit_idx
    where
        recorded.seq is null
        -- A row logged before the hash was xxhash64 holds the sha2 of the change's JSON (64 hex
        -- digits): a replay of it is hashed that way too, and only then.
        or recorded.change_hash != case
            when length(recorded.change_hash) = 64 then {{ sha2_change_hash('events') }}
            else events.change_hash
        end

)

select * from violations
