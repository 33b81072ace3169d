{#-
    Why an existing consumer model (`relation`) cannot continue incrementally, or '' when it can:
    its stamp is missing, sequin_events was rebuilt since (a full refresh of it alone renumbers
    seq, so the consumed seq no longer names the same change), or the consumers' subscriptions
    changed (a consumer added or widened needs the current state of records it never saw).
-#}
{% macro consumer_rebuild_reason(relation, sequin_relation, subscriptions_relation) %}
    {%- set stamp = consumer_stamp(relation) -%}
    {%- if stamp is none -%}
        {{ return('no commit of it says which seq it consumed') }}
    {%- elif stamp.sequin_table_id != sequin_table_id(sequin_relation) -%}
        {{ return(sequin_relation.identifier ~ ' was rebuilt since its last run, so what it consumed is gone or renumbered') }}
    {%- elif stamp.subscriptions != subscriptions_fingerprint(subscriptions_relation) -%}
        {{ return('the consumers seed changed since its last run') }}
    {%- endif -%}
    {{ return('') }}
{% endmacro %}
