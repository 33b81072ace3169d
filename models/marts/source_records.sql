{#-
    One row per source record, for every captured table whatever the consumers subscribe to: the
    record as of its last touch, folded from sequin_events by the contract's rules
    (`apply_touches`). This is the one fold of the project: consumer_records projects it onto each
    consumer's tables, and the typed mirrors and mirror_rejects read it by seq. A record that a
    delete, a key move or a truncate removed stays as a row (a tombstone: record null, is_deleted
    true, the seq of the change that removed it), so that a model applying the changes since its
    last run sees the removals too. A full refresh writes live records only.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['source_id', 'source_schema', 'source_table', 'record_pk'],
        on_schema_change='fail',
        post_hook="{{ unstamp_consumed_seq() }}",
        meta={'wal_lake_reads_by_seq': {'reads': 'sequin_events', 'subscriptions': false}},
    )
}}
{%- set incremental = is_incremental() -%}
{%- set bounds = fold_run_bounds(this, ref('sequin_events'), incremental) -%}
{#-
    `upto` rides on the model's own Delta commit (its merge or create), so the next run starts
    exactly where this one ended, even when its last touches were deletes, and the models reading
    it by seq read it back; the post-hook clears the mark.
-#}
{%- do stamp_run(bounds) -%}
{{ apply_touches(bounds, ref('sequin_events'), this, incremental) }}
