{#-
    The Spark type a column's source type (as column_registry records it) maps to, as SQL over the
    type text `source_type`: a Kafka Connect type (Debezium, `connect_spark_type`) or a Postgres
    type as `format_type` writes it (wal2json, `postgres_spark_type`). Null for a null type.
-#}
{% macro spark_type_for(source_type) -%}
    {%- set text = "lower(trim(" ~ source_type ~ "))" -%}
    case
        when {{ source_type }} is null then null
        when {{ text }} rlike '{{ connect_type_pattern() }}' then {{ connect_spark_type(text) }}
        else {{ postgres_spark_type(text) }}
    end
{%- endmacro %}
