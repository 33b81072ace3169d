{#-
    Why an existing consumer model (`relation`) cannot continue incrementally, or '' when it can:
    its stamp is missing, sequin_events was rebuilt since (a full refresh of it alone renumbers
    seq, so the consumed seq no longer names the same change), or the consumers' subscriptions
    changed (a consumer added or widened needs the current state of records it never saw).
    What it compares comes from `consumer_run_bounds` as the incremental run would read it, kept
    for the invocation: the run that follows asks nothing again.
-#}
{% macro consumer_rebuild_reason(relation, sequin_relation, subscriptions_relation) %}
    {%- set stamp = consumer_stamp(relation) -%}
    {%- if stamp is none -%}
        {{ return('no commit of it says which seq it consumed') }}
    {%- endif -%}
    {%- set bounds = consumer_run_bounds(relation, sequin_relation, subscriptions_relation, true) -%}
    {%- if stamp.sequin_table_id != bounds.sequin_table_id -%}
        {{ return('sequin_events was rebuilt since its last run, so seq was renumbered') }}
    {%- elif stamp.subscriptions != bounds.subscriptions -%}
        {{ return('the consumers seed changed since its last run') }}
    {%- endif -%}
    {{ return('') }}
{% endmacro %}
