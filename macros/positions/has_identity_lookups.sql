{#-
    Whether the run's changes (`relation`: int_events_consumable, in batches past the least consumed
    one of `consumed`) hold any change landed with `old_identity` (REPLICA IDENTITY USING INDEX on
    columns other than the key), whose old key sequin_events must look up. Most runs have none,
    and then the lookup (which reads the run's states and the whole log) is not planned at all.
    True when not executing, or in a unit test (which has no table to ask): the lookup is then
    rendered, correct in every case.
-#}
{% macro has_identity_lookups(relation, consumed) %}
    {%- if not execute or model.resource_type != 'model' -%}
        {{ return(true) }}
    {%- endif -%}
    {%- set query -%}
        select 1 as found
        from {{ relation }}
        where
            old_identity is not null
            {%- if consumed %}
                and batch_id > {{ consumed | map(attribute='batch_id') | min }}
            {%- endif %}
        limit 1
    {%- endset -%}
    {{ return(run_query(query).rows | length > 0) }}
{% endmacro %}
