{#-
    The text a mirror records as the source table it holds (table property `wal_lake.mirror_of`):
    the JSON array [source_id, source_schema, source_table], unambiguous whatever the names hold.
-#}
{% macro mirror_identity(source_id, source_schema, source_table) -%}
    {{ return(tojson([source_id, source_schema, source_table])) }}
{%- endmacro %}
