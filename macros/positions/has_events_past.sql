{#-
    Whether `relation` (int_events_consumable) holds any change in the batches past the least one
    `consumed` lists (consumed_positions): the rows sequin_events' incremental select starts from.
    None means that select is empty, and its run has nothing to merge. True when not executing,
    when nothing was consumed (a first run), or in a unit test (which has no table to ask).
-#}
{% macro has_events_past(relation, consumed) %}
    {%- if not execute or model.resource_type != 'model' or not consumed -%}
        {{ return(true) }}
    {%- endif -%}
    {%- set query -%}
        select 1 as found
        from {{ relation }}
        where batch_id > {{ consumed | map(attribute='batch_id') | min }}
        limit 1
    {%- endset -%}
    {{ return(run_query(query).rows | length > 0) }}
{% endmacro %}
