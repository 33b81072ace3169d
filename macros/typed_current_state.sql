{#-
    A typed view of one source table's live rows: selects consumer_records for one consumer and
    table and turns the `record` map (column -> value text) into typed columns. `columns` is a list
    of (name, spark_type) pairs or a dict. Timestamps accept both renderings the sources send
    (wal2json `2026-01-01 00:00:00+00`, Debezium ISO `2026-01-01T00:00:00Z`): a bare `+hh` offset is
    widened to `+hh:00`, which Spark's cast reads. A value that does not cast becomes null.
-#}
{% macro typed_current_state(source_table, columns, source_schema='public', consumer='all_tables') -%}
    {%- set pairs = columns.items() | list if columns is mapping else columns -%}
    select
        {%- for name, spark_type in pairs %}
            {%- set value = "record['" ~ name ~ "']" %}
            {%- if spark_type | lower in ('timestamp', 'timestamp_ltz', 'timestamp_ntz') %}
        try_cast(regexp_replace({{ value }}, '([+-][0-9]{2})$', '$1:00') as {{ spark_type }}) as {{ name }},
            {%- else %}
        try_cast({{ value }} as {{ spark_type }}) as {{ name }},
            {%- endif %}
        {%- endfor %}
        source_id,
        record_pk,
        seq,
        commit_lsn_text,
        committed_at
    from {{ ref('consumer_records') }}
    where
        consumer_name = '{{ consumer }}'
        and source_schema = '{{ source_schema }}'
        and source_table = '{{ source_table }}'
{%- endmacro %}
