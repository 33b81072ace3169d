{#-
    The generation of what int_events_consumable reads: `table_generation` of the ingestion's
    wal_events and wal_frontier, joined by `/`. sequin_events reads it before it asks what is
    past its consumed batches and puts it on its mark (consumed_mark): while both tables have had
    no commit since the run that left the mark, nothing landed since and the run asks nothing.
    The tables' names come from the sources in the graph: a `source()` here would make them
    inputs of the model. None when not executing or in a unit test (no tables to ask).
-#}
{% macro consumable_generation() %}
    {%- if not execute or model.resource_type != 'model' -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set generations = [] -%}
    {%- for name in ['wal_events', 'wal_frontier'] -%}
        {%- set table = graph.sources.values() | selectattr('source_name', 'equalto', 'wal')
            | selectattr('name', 'equalto', name) | first -%}
        {%- do generations.append(table_generation(api.Relation.create(
            database=table.database, schema=table.schema, identifier=table.identifier, type='table'
        ))) -%}
    {%- endfor -%}
    {{ return(none if none in generations else generations | join('/')) }}
{% endmacro %}
