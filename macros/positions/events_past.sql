{#-
    What int_events_consumable (`relation`) holds in the batches past the least one `consumed` lists
    (consumed_positions), the rows sequin_events' incremental select starts from, in one small query:
    `found`, whether there is any (none: the run has nothing to merge); `identity_lookups`, whether
    any landed with `old_identity` (REPLICA IDENTITY USING INDEX on columns other than the key),
    whose old key the model looks up (none: the lookup, which reads the run's states and the whole
    log, is not planned at all). Both true when not executing or in a unit test (which has no table
    to ask): the model then renders every step, correct in every case; `found` true on a first run.
-#}
{% macro events_past(relation, consumed) %}
    {%- if not execute or model.resource_type != 'model' -%}
        {{ return({'found': true, 'identity_lookups': true}) }}
    {%- endif -%}
    {%- set query -%}
        select
            count(*) > 0 as found,
            coalesce(bool_or(old_identity is not null), false) as identity_lookups
        from {{ relation }}
        {%- if consumed %}
            where batch_id > {{ consumed | map(attribute='batch_id') | min }}
        {%- endif %}
    {%- endset -%}
    {%- set row = run_query(query).rows[0] -%}
    {{ return({'found': row['found'] or not consumed, 'identity_lookups': row['identity_lookups']}) }}
{% endmacro %}
