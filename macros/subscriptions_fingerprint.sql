{#-
    A fingerprint (sha2 text) of the consumers' subscriptions (`relation`: int_consumer_subscriptions):
    a consumer model built for one set of subscriptions is rebuilt when it changes. None when not
    executing. `subscriptions_fingerprint_sql` is the query alone (one row, one column), for a
    caller that asks it beside other things (`consumer_run_bounds`).
-#}
{% macro subscriptions_fingerprint(relation) %}
    {%- if not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {{ return(run_query(subscriptions_fingerprint_sql(relation)).rows[0]['fingerprint']) }}
{% endmacro %}

{% macro subscriptions_fingerprint_sql(relation) -%}
    select sha2(
        coalesce(to_json(array_sort(collect_set(struct(consumer_name, schema_glob, table_glob)))), ''),
        256
    ) as fingerprint
    from {{ relation }}
{%- endmacro %}
