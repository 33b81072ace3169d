{#-
    The typed mirrors of this project: every model with `meta.wal_lake_mirror` (written by
    `python -m python_jobs.mirrors`), as a list of dicts with `source_id`, `source_schema`,
    `source_table` and `relation` (schema.name, as built), sorted by relation. Read from the graph,
    so mirror_tables and mirror_rejects list exactly the mirrors that exist as models. Empty
    when not executing (the graph is built after parsing).
-#}
{% macro mirror_models() %}
    {%- set mirrors = [] -%}
    {%- if not execute -%}
        {{ return(mirrors) }}
    {%- endif -%}
    {%- for node in graph.nodes.values() if node.resource_type == 'model' -%}
        {%- set mirror = (node.config.meta or {}).get('wal_lake_mirror') -%}
        {%- if mirror -%}
            {%- do mirrors.append({
                'source_id': mirror.source_id,
                'source_schema': mirror.source_schema,
                'source_table': mirror.source_table,
                'relation': node.schema ~ '.' ~ (node.alias or node.name),
            }) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(mirrors | sort(attribute='relation')) }}
{% endmacro %}
