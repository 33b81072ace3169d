{#-
    Every value a typed mirror could not convert to its column's type: the record, the column,
    the text the capture sent and why. A mirror writes null there; this table says the null is not
    the source's. Append-only, one row per record, column and seq: an incremental run reads the
    source_records rows with seq in (consumed, upto], as the mirrors do (`mirror_table`).

    The checks are `mirror_reject_checks`: for every mirror, the very conversion it applies, and
    why a value is not held (`mirror_reject_reason`: a BC date, `infinity`, more digits than the
    decimal holds, a multi-dimensional array, or a text that does not convert).
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['source_id', 'source_schema', 'source_table', 'record_pk', 'column_name', 'seq'],
        merge_update=false,
        on_schema_change='fail',
        post_hook="{{ unstamp_consumed_seq() }}",
        meta={'wal_lake_reads_by_seq': {'reads': 'source_records', 'subscriptions': false}},
    )
}}
{%- set bounds = records_run_bounds(this, ref('source_records'), is_incremental()) -%}
{%- do stamp_run(bounds) -%}

with

rejected as (

    {{ mirror_reject_checks(ref('source_records'), ref('column_registry'), bounds) }}

),

final as (

    select
        source_id,
        source_schema,
        source_table,
        mirror_relation,
        record_pk,
        rejected.column_name,
        rejected.source_type,
        rejected.spark_type,
        rejected.raw_value,
        rejected.reason,
        seq,
        commit_lsn_text,
        committed_at

    from rejected

)

select * from final
