{#- A typed NULL record (column -> value text), for touches that carry no row. -#}
{% macro null_record() -%}
    cast(null as map<string, string>)
{%- endmacro %}
