{#-
    Applies the changes of sequin_events with seq in (consumed, upto] to every subscribed consumer:
    one row per consumer and live source record. The CTE flow and the rules are in `apply_touches`,
    which source_records shares (one record set per source, for the typed mirrors).

    It rebuilds itself in full (`should_full_refresh`) when its stamp no longer matches what it was
    built from: sequin_events rebuilt (seq renumbered) or the consumers seed changed.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['consumer_name', 'source_id', 'source_schema', 'source_table', 'record_pk'],
        merge_delete_column='is_deleted',
        on_schema_change='ignore',
        post_hook="{{ unstamp_consumed_seq() }}",
        meta={'wal_lake_consumer': true},
    )
}}
{#-
    on_schema_change 'ignore': an incremental run selects `is_deleted`, a helper the merge reads and
    never writes, so the select never matches the table's columns ('fail' would always fail and
    'append_new_columns' would add it). A change of the written columns takes a full refresh.
-#}
{%- set incremental = is_incremental() -%}
{%- set bounds = consumer_run_bounds(
    this, ref('sequin_events'), ref('int_consumer_subscriptions'), incremental
) -%}
{#-
    `upto` rides on the model's own Delta commit (its merge or create), so the next run starts
    exactly where this one ended, even when its last touches were deletes; the post-hook clears the
    mark. Only a run that writes stamps: not a compile, not a unit test.
-#}
{%- if execute and flags.WHICH in ('run', 'build') and model.resource_type == 'model' -%}
    {%- do run_query(stamp_consumed_seq(bounds)) -%}
{%- endif -%}
{{ apply_touches(
    bounds, ref('sequin_events'), ref('int_consumer_subscriptions'), this, incremental
) }}
