{#-
    `rows` (lists of SQL literals, in the order of `columns`) as an inline relation named `alias`
    with `columns` ((name, Spark type) pairs); an empty relation of those types when there are no
    rows.
-#}
{% macro inline_relation(alias, columns, rows) -%}
    {%- if rows -%}
        select * from values
        {%- for row in rows %}
            ({{ row | join(', ') }}){{ ',' if not loop.last }}
        {%- endfor %}
            as {{ alias }} ({{ columns | map(attribute=0) | join(', ') }})
    {%- else -%}
        select
        {%- for name, type in columns %}
            cast(null as {{ type }}) as {{ name }}{{ ',' if not loop.last }}
        {%- endfor %}
        where false
    {%- endif -%}
{%- endmacro %}
