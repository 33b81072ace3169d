{#-
    What int_events_consumable (`relation`) holds in the batches past those `consumed` lists
    (consumed_positions, past_consumed_batches), the rows sequin_events' incremental select starts
    from, in one small query grouped by source: `found`, whether there is any (none: the run has nothing to merge);
    `identity_lookups`, whether any landed with `old_identity` (REPLICA IDENTITY USING INDEX on
    columns other than the key), whose old key the model looks up (none: the lookup, which reads
    the run's states and the whole log, is not planned at all); `positions`, per source the greatest
    batch and position read, which the run's mark adds to what was consumed (consumed_mark).
    `found` and `identity_lookups` true, `positions` empty, when not executing or in a unit test
    (which has no table to ask): the model then renders every step, correct in every case; `found`
    true on a first run.
-#}
{% macro events_past(relation, consumed) %}
    {%- if not execute or model.resource_type != 'model' -%}
        {{ return({'found': true, 'identity_lookups': true, 'positions': []}) }}
    {%- endif -%}
    {%- set query -%}
        select
            source_id,
            max(batch_id) as batch_id,
            max(struct(commit_lsn, commit_idx)).commit_lsn as commit_lsn,
            max(struct(commit_lsn, commit_idx)).commit_idx as commit_idx,
            bool_or(old_identity is not null) as identity_lookups
        from {{ relation }}
        where {{ past_consumed_batches(consumed) }}
        group by source_id
    {%- endset -%}
    {%- set rows = run_query(query).rows -%}
    {{ return({
        'found': rows | length > 0 or not consumed,
        'identity_lookups': rows | selectattr('identity_lookups') | list | length > 0,
        'positions': rows,
    }) }}
{% endmacro %}
