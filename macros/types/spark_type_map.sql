{#-
    A dict of type name to Spark type as a SQL map literal, `map('int2', 'smallint', …)`: a lookup
    in it is one expression however many names it holds, where a CASE repeats its operand's SQL
    in every `when`.
-#}
{% macro spark_type_map(types) -%}
    map(
        {%- for name, spark_type in types.items() %}
        '{{ name }}', '{{ spark_type }}'{{ ',' if not loop.last }}
        {%- endfor %}
    )
{%- endmacro %}
