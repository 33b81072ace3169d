{#-
    A token that changes with every commit that changes `relation`'s rows (a Delta table): its
    last commit's time, file count and bytes, from the `describe detail` that `sequin_table_id`
    reads (once per invocation). A model that reads sequin_events by seq stamps it beside its seq
    (`fold_run_bounds`): while the token is the one stamped, sequin_events has had no commit since,
    and its range is known to be empty without a query. A commit that changes no row may change
    the token: the next run then asks, and finds the range empty. None when not executing.
-#}
{% macro table_generation(relation) %}
    {%- if not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set detail = run_query_once('describe detail ' ~ real_table(relation)).rows[0] -%}
    {%- if detail['lastModified'] is none -%}
        {#- Not a Delta table (a seed written as Parquet): nothing vouches for it, and it is read. -#}
        {{ return(none) }}
    {%- endif -%}
    {{ return(
        detail['lastModified'].strftime('%Y%m%d%H%M%S%f') ~ '.' ~ (detail['numFiles'] | int)
        ~ '.' ~ (detail['sizeInBytes'] | int)
    ) }}
{% endmacro %}

{#-
    `table_generation` of each table the graph `nodes` name (sources by their identifier, seeds and
    models by their alias), joined by `/`; none when any of them has none.
-#}
{% macro nodes_generation(nodes) %}
    {%- set generations = [] -%}
    {%- for node in nodes -%}
        {%- do generations.append(table_generation(api.Relation.create(
            database=node.database, schema=node.schema, type='table',
            identifier=node.identifier if node.resource_type == 'source' else node.alias,
        ))) -%}
    {%- endfor -%}
    {{ return(none if none in generations else generations | join('/')) }}
{% endmacro %}
