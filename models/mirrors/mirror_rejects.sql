{#-
    Every value a typed mirror holds as null because it could not convert the value the source
    sent: the record, the column, the text the capture sent and why. The mirror writes null there;
    this table says the null is not the source's. One row per record and column, as the mirror
    holds them now: a later touch that brings a value the mirror holds, or deletes the record,
    takes its row away, so a full refresh gives the same table as the runs that built it.

    Flow:
        source_records (seq in (consumed, upto], as the mirrors read it: `mirror_table`) -> records
          -> rejected: each touched record's values its mirror cannot convert (`mirror_reject_checks`)
          -> touched:  the records of that range (incremental runs only)
          -> cleared:  this table's rows of touched records whose value is no longer rejected,
                       deleted by the merge (`merge_delete_column`)
          -> final

    The checks are `mirror_reject_checks`: for every mirror, the very conversion it applies, and
    why a value is not held (`mirror_reject_reason`: a BC date, `infinity`, more digits than the
    decimal holds, a multi-dimensional array, or a text that does not convert).
-#}
{{
    config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key=['source_id', 'source_schema', 'source_table', 'record_pk', 'column_name'],
        merge_delete_column='is_cleared',
        on_schema_change='ignore',
        post_hook=["{{ stamp_unwritten_run() }}", "{{ unstamp_consumed_seq() }}"],
        meta={'wal_lake_reads_by_seq': {'reads': 'source_records', 'subscriptions': false}},
    )
}}
{#-
    on_schema_change 'ignore': an incremental run selects `is_cleared`, a helper the merge reads and
    never writes, so the select never matches the table's columns ('fail' would always fail). A
    change of the written columns takes a full refresh.
-#}
{%- set bounds = records_run_bounds(this, ref('source_records'), is_incremental()) -%}
{#- `upto` rides on the model's own commit; a run with no seq past the consumed one runs no merge. -#}
{%- do stamp_run(bounds) -%}

with

records as (

    select * from {{ ref('source_records') }}
    where
        seq > {{ bounds.consumed }}
        and seq <= {{ bounds.upto }}
        -- Every mirror's checks read these rows, and an incremental run's touched records: one
        -- scan then (`computed_once`); a full refresh reads each table's rows apart.
        and {{ computed_once() if is_incremental() else 'true' }}

),

rejected as (

    {{ mirror_reject_checks('records', ref('column_registry'), bounds) }}

),

rejects as (

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

),

{% if is_incremental() %}

    touched as (

        select
            source_id,
            source_schema,
            source_table,
            record_pk

        from records

    ),

    cleared as (

        select
            held.source_id,
            held.source_schema,
            held.source_table,
            held.mirror_relation,
            held.record_pk,
            held.column_name,
            held.source_type,
            held.spark_type,
            held.raw_value,
            held.reason,
            held.seq,
            held.commit_lsn_text,
            held.committed_at

        from {{ this }} as held

        left semi join touched
            on
                held.source_id = touched.source_id
                and held.source_schema = touched.source_schema
                and held.source_table = touched.source_table
                and held.record_pk <=> touched.record_pk

        left anti join rejects
            on
                held.source_id = rejects.source_id
                and held.source_schema = rejects.source_schema
                and held.source_table = rejects.source_table
                and held.record_pk <=> rejects.record_pk
                and held.column_name = rejects.column_name

    ),

    final as (

        select
            *,
            false as is_cleared
        from rejects

        union all

        select
            *,
            true as is_cleared
        from cleared

    )

{% else %}

    final as (

        select * from rejects

    )

{% endif %}

select * from final
