{#-
    True when a change's schema and table match a subscription's schema and table globs
    (int_consumer_subscriptions), each on its own: `*` stands for any run of characters and
    everything else is literal (`%`, `_` and `\` included).
-#}
{% macro table_matches(schema_column, table_column, schema_glob_column, table_glob_column) -%}
    {{ schema_column }} like {{ glob_to_like(schema_glob_column) }}
    and {{ table_column }} like {{ glob_to_like(table_glob_column) }}
{%- endmacro %}
