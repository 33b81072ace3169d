{#-
    A join condition: `left.c = right.c` for every column in `columns`, joined with `and`.
    consumer_records joins on the same record key many times; one spelling keeps them in step.
-#}
{% macro columns_equal(left, right, columns) -%}
    {%- for column in columns -%}
        {{ left }}.{{ column }} = {{ right }}.{{ column }}{{ ' and ' if not loop.last }}
    {%- endfor -%}
{%- endmacro %}
