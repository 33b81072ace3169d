{#-
    The ordered, deduplicated change log: every landed change once, numbered with a bigint `seq`
    above the table's maximum, in (commit_lsn, commit_idx) order per source.

    int_events_consumable (landed, at or below the frontier) -> events (batches past the consumed)
    events past each source's greatest consumed position (consumed_position_passed) -> unconsumed
      (a position at or below the consumed one is a replay or a violation: sequin_violations)
    unconsumed -> new_changes (one row per position: the first landed copy)
    new_changes -> resolved_changes (old keys of REPLICA IDENTITY USING INDEX changes looked up,
      `identity_old_keys`; only when the run has some)
    seq numbering: a small incremental run (at most wal_lake_seq_inline_transactions transactions)
      -> transaction_offsets inlined, as `events_past` found them; any other run:
      unconsumed -> transactions (first commit_idx, span) -> range_spans
      -> source_spans -> source_offsets -> range_offsets -> transaction_offsets
    resolved_changes + transaction_offsets + max_seq -> final
      (seq = max_seq + the transaction's offset + commit_idx past its first + 1)
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['source_id', 'commit_lsn', 'commit_idx'],
        merge_update=false,
        on_schema_change='append_new_columns',
        post_hook=["{{ stamp_unwritten_run() }}", "{{ unstamp_consumed_seq() }}"],
        meta={'wal_lake_stamps_positions': true},
        tblproperties={
            'delta.dataSkippingStatsColumns':
                'seq,source_id,commit_lsn,commit_idx,batch_id,action,source_table,record_pk',
        },
    )
}}
{#-
    Delta keeps file statistics only of the columns its readers filter by (seq ranges, the merge's
    positions, batches, keyless changes), not of the first 32: less to compute on every write.
    Set when the table is created.
-#}
{#-
    on_schema_change 'append_new_columns': a `seq` once assigned never changes, so a column the
    model gains (old_identity) is added to the existing table, null on the rows logged before it,
    instead of forcing a full refresh that would renumber the log. A column is never dropped.
-#}

{#-
    Incremental runs read only batches past what each source has consumed (literal bounds,
    `past_consumed_batches`, so Delta's file statistics skip the history) and keep only positions
    above the source's greatest consumed position. Anything at or below it is a replay or a violation: both
    stay out of this table; sequin_violations reports the second kind. What was consumed rides on
    the table's own Delta commit (`consumed_positions`, `consumed_mark`): no run reads
    the whole log to find it.
-#}
{%- set consumed = consumed_positions(this) if is_incremental() else [] -%}
{#-
    The landed tables' generation, read before what is past the consumed batches is: when it is the
    one on the last mark, nothing landed since, and nothing is asked (`consumable_generation`).
-#}
{%- set generation = consumable_generation() -%}
{%- set unchanged = is_incremental() and generation is not none and generation == consumed_generation(this) -%}
{#-
    A small run (at most wal_lake_seq_inline_transactions transactions) gets its transactions'
    offsets with what is past the consumed batches, in the same query, and inlines them.
-#}
{%- set inline_transactions = var('wal_lake_seq_inline_transactions', 5000) | int -%}
{%- set past = {'found': false, 'identity_lookups': false, 'positions': [], 'transactions': none} if unchanged
    else events_past(ref('int_events_consumable'), consumed, inline_transactions) -%}
{#- Nothing consumable past the consumed batches: nothing to merge, no merge at all (`skip_merge_when`). -#}
{%- do skip_merge_when(is_incremental() and not past.found) -%}
{#- A run that found nothing still marks a new generation (on a commit of its own: stamp_unwritten_run). -#}
{%- set marks = past.found or (generation is not none and not unchanged) -%}
{%- do mark_commits(consumed_mark(consumed, past.positions, generation) if marks else none) -%}
{#- Its insert-only merge can match only rows at or past the consumed positions: it reads no others. -#}
{%- do merge_target_predicate(at_or_past_consumed(consumed, 'DBT_INTERNAL_DEST') if consumed else none) -%}
{%- set resolve_identities = past.found and past.identity_lookups -%}
{#- seq's running sums go per range of 2^seq_range_bits bytes of WAL (16 MiB): transactions' tasks. -#}
{%- set seq_range_bits = var('wal_lake_seq_range_bits', 24) | int -%}

with

events as (

    select * from {{ ref('int_events_consumable') }}
    {%- if consumed %}
        where {{ past_consumed_batches(consumed) }}
    {%- endif %}

),

unconsumed as (

    -- Every copy of a position is at or below the consumed one, or none is: filtering copies before
    -- deduplicating them keeps the same changes, and the transactions' spans need no dedup.
    select * from events
    {%- if consumed %}
        where {{ consumed_position_passed(consumed) }}
    {%- endif %}

),

unconsumed_by_transaction as (

    -- One shuffle by transaction serves both the dedup below and the join to the transactions'
    -- offsets in `final`.
    select * from unconsumed
    distribute by source_id, commit_lsn

),

new_changes as (

    {{ first_row_per_key(
        'unconsumed_by_transaction',
        ['source_id', 'commit_lsn', 'commit_idx'],
        'batch_id, landing_file, landing_line'
    ) }}

),

{%- if resolve_identities %}

    -- REPLICA IDENTITY USING INDEX on columns other than the key: the old keys of the updates and
    -- deletes that landed only their identity, looked up in this run's states and the log's.
    {{ identity_old_keys('new_changes', this if is_incremental() else none) }},
{%- else %}

    -- No change of the run landed an old_identity: every key is as it was sent.
    resolved_changes as (

        select * from new_changes

    ),
{%- endif %}

-- seq numbering, apart from the changes: one row per transaction with its offset (the spans of the
-- run's transactions before it). A small run's come inlined; any other run's are summed per range of
-- WAL, per source, then over the sources.
max_seq as (

    {% if is_incremental() -%}
        select coalesce(max(seq), 0) as seq from {{ this }}
    {%- else -%}
        select cast(0 as bigint) as seq
    {%- endif %}

),

{%- if past.transactions is not none %}

    transaction_offsets as (

        -- A small run: its transactions past the consumed positions, each with the spans of those
        -- before it summed, as events_past found them (source_id, commit_lsn order; no shuffle).
        {{ transaction_offsets_relation(past.transactions) }}

    ),
{%- else %}

    transactions as (

        -- seq without a window over the changes: a change's seq is its transaction's offset plus its
        -- commit_idx past the transaction's first, and a transaction's offset is the sum of the spans
        -- (last commit_idx - first + 1) of the run's transactions before it. One row per transaction,
        -- from the positions alone (copies do not change a first or last commit_idx). Dense wherever
        -- commit_idx is (a transaction's changes numbered 0, 1, 2, ...); a rejected line leaves a gap.
        select
            source_id,
            commit_lsn,
            min(commit_idx) as first_idx,
            max(commit_idx) - min(commit_idx) + 1 as span,
            -- Offsets are summed over the transactions of a range of {{ 2 ** seq_range_bits }} bytes of
            -- WAL (a window partitioned by source and range), then over a source's ranges (partitioned
            -- by source), then over the sources: no window runs over the whole run in one task.
            shiftright(commit_lsn, {{ seq_range_bits }}) as seq_range

        from unconsumed
        group by source_id, commit_lsn

    ),

    range_spans as (

        select
            source_id,
            seq_range,
            sum(span) as span

        from transactions
        group by source_id, seq_range

    ),

    source_spans as (

        select
            source_id,
            sum(span) as span

        from range_spans
        group by source_id

    ),

    ordered_sources as (

        -- Sources are few (one per slot): one array of them, in order.
        select array_sort(collect_list(struct(source_id, span))) as source_list
        from source_spans

    ),

    source_offsets as (

        -- Each source with the spans of the sources before it, summed over the array rather than in a
        -- window without a partition.
        select
            inline(
                transform(
                    source_list,
                    (item, i) -> named_struct(
                        'source_id', item.source_id,
                        'source_offset',
                        aggregate(slice(source_list, 1, i), cast(0 as bigint), (total, earlier) -> total + earlier.span)
                    )
                )
            )

        from ordered_sources

    ),

    range_offsets as (

        select /*+ broadcast(source_offsets) */
            range_spans.source_id,
            range_spans.seq_range,
            source_offsets.source_offset
            + coalesce(
                sum(range_spans.span) over (
                    partition by range_spans.source_id
                    order by range_spans.seq_range
                    rows between unbounded preceding and 1 preceding
                ),
                0
            ) as range_offset

        from range_spans
        inner join source_offsets
            on range_spans.source_id = source_offsets.source_id

    ),

    transaction_offsets as (

        select /*+ broadcast(range_offsets) */
            transactions.source_id,
            transactions.commit_lsn,
            transactions.first_idx,
            range_offsets.range_offset
            + coalesce(
                sum(transactions.span) over (
                    partition by transactions.source_id, transactions.seq_range
                    order by transactions.commit_lsn
                    rows between unbounded preceding and 1 preceding
                ),
                0
            ) as seq_offset

        from transactions
        inner join range_offsets
            on
                transactions.source_id = range_offsets.source_id
                and transactions.seq_range = range_offsets.seq_range

    ),
{%- endif %}

final as (

    select /*+ broadcast(max_seq) */
        max_seq.seq
        + transaction_offsets.seq_offset
        + resolved_changes.commit_idx - transaction_offsets.first_idx + 1 as seq,
        resolved_changes.source_id,
        resolved_changes.commit_lsn,
        {{ lsn_to_text('resolved_changes.commit_lsn') }} as commit_lsn_text,
        resolved_changes.commit_idx,
        resolved_changes.change_lsn,
        resolved_changes.xid,
        resolved_changes.committed_at,
        resolved_changes.action,
        resolved_changes.source_schema,
        resolved_changes.source_table,
        resolved_changes.key_columns,
        resolved_changes.record_pk,
        resolved_changes.record,
        resolved_changes.changes,
        resolved_changes.old_record_pk,
        resolved_changes.old_identity,
        resolved_changes.change_hash,
        resolved_changes.batch_id,
        resolved_changes.ingested_at

    from resolved_changes
    inner join transaction_offsets
        on
            resolved_changes.source_id = transaction_offsets.source_id
            and resolved_changes.commit_lsn = transaction_offsets.commit_lsn
    cross join max_seq

)

select * from final
