{#-
    The rows of mirror_tables as a select: one per mirror (`mirror_models`) and column
    (`mirror_columns` over `registry`), typed and empty when there are no mirrors.
-#}
{% macro mirror_catalog_rows(registry) -%}
    {%- set rows = [] -%}
    {%- for mirror in mirror_models() -%}
        {%- for column in mirror_columns(registry, mirror.source_id, mirror.source_schema, mirror.source_table) -%}
            {%- do rows.append((mirror, loop.index, column)) -%}
        {%- endfor -%}
    {%- endfor -%}
    {%- if rows -%}
    select * from values
        {%- for mirror, position, column in rows %}
        (
            {{ sql_string(mirror.source_id) }},
            {{ sql_string(mirror.source_schema) }},
            {{ sql_string(mirror.source_table) }},
            {{ sql_string(mirror.relation) }},
            {{ position }},
            {{ sql_string(column.name) }},
            {{ sql_string(column.source_type) }},
            {{ sql_string(column.spark_type) }},
            {{ sql_string(column.note) if column.note else 'cast(null as string)' }}
        ){{ ',' if not loop.last }}
        {%- endfor %}
        as mirror_column (
            source_id, source_schema, source_table, mirror_relation, column_position, column_name,
            source_type, spark_type, type_note
        )
    {%- else -%}
    select
        cast(null as string) as source_id,
        cast(null as string) as source_schema,
        cast(null as string) as source_table,
        cast(null as string) as mirror_relation,
        cast(null as int) as column_position,
        cast(null as string) as column_name,
        cast(null as string) as source_type,
        cast(null as string) as spark_type,
        cast(null as string) as type_note
    where false
    {%- endif -%}
{%- endmacro %}
