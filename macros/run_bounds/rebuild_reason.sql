{#-
    Why an existing model that reads another by seq (`relation`) cannot continue incrementally,
    or '' when it can: its stamp is missing, the model it reads (`read_relation`: sequin_events
    for source_records, source_records for consumer_records and the mirrors) is not the table its
    stamp names (rebuilt since: a full refresh renumbers seq, so the consumed seq no longer names
    the same change; or a warehouse of an earlier version), or the consumers' subscriptions
    changed (a consumer added or widened needs the current state of records it never saw).
-#}
{% macro rebuild_reason(relation, read_relation, subscriptions_relation) %}
    {%- set stamp = seq_stamp(relation) -%}
    {%- if stamp is none -%}
        {{ return('no commit of it says which seq it consumed') }}
    {%- elif stamp.sequin_table_id != sequin_table_id(read_relation) -%}
        {{ return(
            read_relation.identifier ~ ' is not the table its last run read (rebuilt since, so seq was'
            ~ ' renumbered, or a warehouse of an earlier version)'
        ) }}
    {%- elif stamp.subscriptions != subscriptions_fingerprint(subscriptions_relation, relation) -%}
        {{ return('the consumers seed changed since its last run') }}
    {%- endif -%}
    {{ return('') }}
{% endmacro %}
