{#-
    One row per source record, for every captured table whatever the consumers subscribe to: the
    record as of its last touch, folded from sequin_events by the same rules as consumer_records
    (`apply_touches`). The typed mirrors read it by seq. A record that a delete, a key move or a
    truncate removed stays as a row (a tombstone: record null, is_deleted true, the seq of the
    change that removed it), so that a mirror applying the changes since its last run sees the
    removals too. A full refresh writes live records only.
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['source_id', 'source_schema', 'source_table', 'record_pk'],
        on_schema_change='fail',
        post_hook="{{ unstamp_consumed_seq() }}",
        meta={'wal_lake_consumer': {'reads': 'sequin_events', 'subscriptions': false}},
    )
}}
{%- set incremental = is_incremental() -%}
{%- set bounds = consumer_run_bounds(this, ref('sequin_events'), none, incremental) -%}
{#- `upto` rides on the model's own commit, as in consumer_records; the mirrors read it back. -#}
{%- if execute and flags.WHICH in ('run', 'build') and model.resource_type == 'model' -%}
    {%- do run_query(stamp_consumed_seq(bounds)) -%}
{%- endif -%}
{{ apply_touches(bounds, ref('sequin_events'), none, this, incremental, tombstones=true) }}
