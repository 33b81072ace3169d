{#-
    SQL applying `convert` (mirror_value by default, or mirror_reject_reason) to one column's value of a
    source_records row, with the source type the value was sent with: a value is decoded by the type
    in force at the row's last touch (`commit_lsn`, `commit_idx` of the row), the latest of the
    column's `types` (mirror_columns) that began at or before it. Only a column whose types decode
    differently needs this (a Debezium Decimal whose scale changed, Timestamp to MicroTimestamp);
    Postgres text reads the same whatever its type, so any other column uses its latest type.
-#}
{% macro mirror_column_value(column, convert=none) -%}
    {%- set convert = convert or mirror_value -%}
    {%- set raw = 'record[' ~ sql_string(column.name) ~ ']' -%}
    {%- set encoded = [] -%}
    {%- for type in column.types if (connect_encoding(type.source_type) or {}).get('encoding', 'text') != 'text' -%}
        {%- do encoded.append(type) -%}
    {%- endfor -%}
    {%- if column.types | length > 1 and encoded -%}
        case
            {%- for type in column.types[1:] | reverse %}
            when commit_lsn > {{ type.first_commit_lsn }}
                or (commit_lsn = {{ type.first_commit_lsn }} and commit_idx >= {{ type.first_commit_idx }})
                then {{ convert(raw, column.spark_type, type.source_type) }}
            {%- endfor %}
            else {{ convert(raw, column.spark_type, column.types[0].source_type) }}
        end
    {%- else -%}
        {{ convert(raw, column.spark_type, column.source_type) }}
    {%- endif -%}
{%- endmacro %}
