{#-
    A fingerprint (sha2 text) of the consumers' subscriptions (`relation`: int_consumer_subscriptions):
    a model built for one set of subscriptions (consumer_records) is rebuilt when it changes. None when not
    executing; 'none' for a model that applies no subscriptions (`relation` none: source_records
    and the mirrors). Read once per invocation (`run_query_once`).
-#}
{% macro subscriptions_fingerprint(relation) %}
    {%- if not execute -%}
        {{ return(none) }}
    {%- elif relation is none -%}
        {{ return('none') }}
    {%- endif -%}
    {%- set query -%}
        select sha2(
            coalesce(to_json(array_sort(collect_set(struct(consumer_name, schema_glob, table_glob)))), ''),
            256
        ) as fingerprint
        from {{ relation }}
    {%- endset -%}
    {{ return(run_query_once(query).rows[0]['fingerprint']) }}
{% endmacro %}
