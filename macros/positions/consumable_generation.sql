{#-
    The generation of what int_events_consumable reads: `table_generation` of the ingestion's
    wal_events and wal_files (wal_frontier is a view over wal_files), joined by `/`. sequin_events
    reads it before it asks what is past its consumed batches and puts it on its mark
    (consumed_mark): while both tables have had no commit since the run that left the mark,
    nothing landed since and the run asks nothing.
    The tables' names come from the sources in the graph: a `source()` here would make them
    inputs of the model. None when not executing or in a unit test (no tables to ask).
-#}
{% macro consumable_generation() %}
    {%- if not execute or model.resource_type != 'model' -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set landed = graph.sources.values() | selectattr('source_name', 'equalto', 'wal')
        | selectattr('name', 'in', ['wal_events', 'wal_files']) | sort(attribute='name') | list -%}
    {{ return(nodes_generation(landed)) }}
{% endmacro %}
