{#-
    A join condition: `left.c = right.c` for every column in `columns`, joined with `and`. The fold's
    key-move macros, record_history, consumer_records and column_registry join on multi-column keys
    (a table, a record, a column); one spelling keeps those joins in step.
-#}
{% macro columns_equal(left, right, columns) -%}
    {%- for column in columns -%}
        {{ left }}.{{ column }} = {{ right }}.{{ column }}{{ ' and ' if not loop.last }}
    {%- endfor -%}
{%- endmacro %}
