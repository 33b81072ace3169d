{#-
    The condition that picks one table's source_records rows in a run's seq range (bounds.consumed,
    bounds.upto] (`records_run_bounds`): what a mirror applies and mirror_rejects checks.
-#}
{% macro mirror_range(source_id, source_schema, source_table, bounds) -%}
    source_id = {{ sql_string(source_id) }}
    and source_schema = {{ sql_string(source_schema) }}
    and source_table = {{ sql_string(source_table) }}
    and seq > {{ bounds.consumed }}
    and seq <= {{ bounds.upto }}
{%- endmacro %}
