{#-
    True when `schema.table` matches a consumer's subscription pattern, where `*` stands for any
    run of characters and everything else is literal (`_` and `\` included).
-#}
{% macro table_matches(schema_column, table_column, pattern_column) -%}
    concat({{ schema_column }}, '.', {{ table_column }})
    like replace(replace(replace({{ pattern_column }}, '\\', '\\\\'), '_', '\\_'), '*', '%')
{%- endmacro %}
