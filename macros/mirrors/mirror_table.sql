{#-
    The body of a typed mirror model (`generated_mirrors/`, written by `python -m python_jobs.mirrors`): one
    source table's live rows with each column in its Spark type (`mirror_columns`,
    `mirror_column_value`: `mirror_value` with the type each value was sent with),
    plus the last touch's position (_wal_lake_record_pk, _wal_lake_seq, _wal_lake_commit_lsn,
    _wal_lake_committed_at).

    It reads source_records, the records of every source folded by the same rules as
    consumer_records, by seq: an incremental run takes the rows with seq in (consumed, upto], where
    `consumed` is the seq stamped on the mirror's last commit and `upto` the one stamped on
    source_records' own; a removed record is a row there (a tombstone), which the merge deletes here.
    A column seen for the first time is added to the table (earlier rows null); a type that widens
    the column's is applied in place (Delta type widening); any other type change leaves the column
    as it is, listed in mirror_tables. Column names are kept as the source has them (Delta column
    mapping: spaces, dots, quotes, any character). The table records which source table it holds
    (`wal_lake.mirror_of`), and an incremental run refuses a table that holds another
    (`mirror_check_identity`).
-#}
{% macro mirror_table(source_id, source_schema, source_table) %}
    {{ config(
        materialized='incremental',
        incremental_strategy='merge',
        unique_key='_wal_lake_record_pk',
        merge_delete_column='_wal_lake_deleted',
        on_schema_change='ignore',
        schema='mirror',
        tags=['mirror'],
        tblproperties={
            'delta.enableTypeWidening': 'true',
            'delta.columnMapping.mode': 'name',
            'wal_lake.mirror_of': mirror_identity(source_id, source_schema, source_table) | replace('\\', '\\\\') | replace("'", "\\'"),
        },
        post_hook=["{{ stamp_unwritten_run() }}", "{{ unstamp_consumed_seq() }}"],
        meta={
            'wal_lake_reads_by_seq': {'reads': 'source_records', 'subscriptions': false},
            'wal_lake_mirror': {
                'source_id': source_id, 'source_schema': source_schema, 'source_table': source_table,
            },
        },
    ) }}
    {#-
        on_schema_change 'ignore': the incremental select carries `_wal_lake_deleted`, which the
        merge reads and never writes; new columns are added below instead.
    -#}
    {%- set records = ref('source_records') -%}
    {%- set columns = mirror_columns(ref('column_registry'), source_id, source_schema, source_table) -%}
    {%- set incremental = is_incremental() -%}
    {%- set bounds = records_run_bounds(this, records, incremental) -%}
    {#-
        Only in a run that writes (not a compile or a unit test): the table's identity checked and
        its columns changed, in commits of their own without a stamp (a mark set by a model that
        failed before this one is cleared first); then the stamp, which rides on the merge's commit
        alone: a merge that fails leaves the mirror's last stamp where it was.
    -#}
    {%- if writes_this_model() -%}
        {%- do run_query(unstamp_consumed_seq()) -%}
        {%- if incremental -%}
            {%- do mirror_check_identity(this, source_id, source_schema, source_table) -%}
            {%- do mirror_evolve_columns(this, columns) -%}
        {%- endif -%}
    {%- endif -%}
    {%- do stamp_run(bounds) %}

with

records as (

    select * from {{ records }}
    where
        {{ mirror_range(source_id, source_schema, source_table, bounds) }}
        {%- if not incremental %}
            and not is_deleted
        {%- endif %}

),

final as (

    select
        {%- for column in columns %}
            {{ mirror_column_value(column) }}
                as `{{ column.name | replace('`', '``') }}`,
        {%- endfor %}
        record_pk as _wal_lake_record_pk,
        seq as _wal_lake_seq,
        commit_lsn_text as _wal_lake_commit_lsn,
        committed_at as _wal_lake_committed_at
        {%- if incremental %},
            is_deleted as _wal_lake_deleted
        {%- endif %}

    from records

)

select * from final
{% endmacro %}
