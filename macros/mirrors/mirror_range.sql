{#-
    The condition that picks one table's source_records rows in a run's seq range (bounds.consumed,
    bounds.upto] (`records_run_bounds`): what a mirror applies and mirror_rejects checks.
-#}
{% macro mirror_range(source_id, source_schema, source_table, bounds) -%}
    source_id = '{{ source_id | replace("'", "''") }}'
    and source_schema = '{{ source_schema | replace("'", "''") }}'
    and source_table = '{{ source_table | replace("'", "''") }}'
    and seq > {{ bounds.consumed }}
    and seq <= {{ bounds.upto }}
{%- endmacro %}
