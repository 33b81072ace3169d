{#-
    A select of every value in `records` (source_records) with seq in (bounds.consumed,
    bounds.upto] that its mirror cannot convert: for each mirror (`mirror_models`) and each of its
    columns that can fail to convert (`mirror_columns` over `registry`: of a type other than string,
    or decoded first, `connect_encoding`), the value the capture sent and `mirror_value`'s result, kept where the one is not null and the other is. One row per
    rejected value: the record's key and position and a struct `rejected` (column_name,
    source_type, spark_type, raw_value, converts, and why: `mirror_reject_reason`). Typed and empty when no mirror can reject.
-#}
{% macro mirror_reject_checks(records, registry, bounds) -%}
    {%- set checks = [] -%}
    {%- for mirror in mirror_models() -%}
        {#- A string column converts whatever was sent, unless it is decoded first (a Debezium time). -#}
        {%- set checked = [] -%}
        {%- for column in mirror_columns(registry, mirror.source_id, mirror.source_schema, mirror.source_table) -%}
            {%- set decoded = [] -%}
            {%- for type in column.types
                if (connect_encoding(type.source_type) or {}).get('encoding', 'text') != 'text' -%}
                {%- do decoded.append(type) -%}
            {%- endfor -%}
            {%- if column.spark_type != 'string' or decoded -%}
                {%- do checked.append(column) -%}
            {%- endif -%}
        {%- endfor -%}
        {%- if checked -%}
            {%- do checks.append((mirror, checked)) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- for mirror, checked in checks %}
    select
        source_id,
        source_schema,
        source_table,
        {{ sql_string(mirror.relation) }} as mirror_relation,
        record_pk,
        seq,
        commit_lsn_text,
        committed_at,
        explode(filter(
            array(
                {%- for column in checked %}
                {%- set raw = 'record[' ~ sql_string(column.name) ~ ']' %}
                named_struct(
                    'column_name', {{ sql_string(column.name) }},
                    'source_type', {{ sql_string(column.source_type) }},
                    'spark_type', {{ sql_string(column.spark_type) }},
                    'raw_value', {{ raw }},
                    'converts', {{ mirror_column_value(column) }} is not null,
                    'reason', {{ mirror_column_value(column, mirror_reject_reason) }}
                ){{ ',' if not loop.last }}
                {%- endfor %}
            ),
            checked_value -> checked_value.raw_value is not null and not checked_value.converts
        )) as rejected
    from {{ records }}
    where
        {{ mirror_range(mirror.source_id, mirror.source_schema, mirror.source_table, bounds) }}
        and record is not null
    {{ 'union all' if not loop.last }}
    {%- else %}
    select
        cast(null as string) as source_id,
        cast(null as string) as source_schema,
        cast(null as string) as source_table,
        cast(null as string) as mirror_relation,
        cast(null as string) as record_pk,
        cast(null as bigint) as seq,
        cast(null as string) as commit_lsn_text,
        cast(null as timestamp) as committed_at,
        cast(null as struct<
            column_name: string, source_type: string, spark_type: string, raw_value: string, converts: boolean,
            reason: string
        >) as rejected
    from {{ records }}
    where false
    {%- endfor %}
{%- endmacro %}
