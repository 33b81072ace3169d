{#-
    A fingerprint (sha2 text) of the consumers' subscriptions (`relation`: int_consumer_subscriptions):
    a model built for one set of subscriptions (consumer_records) is rebuilt when it changes. None when not
    executing; 'none' for a model that applies no subscriptions (`relation` none: source_records
    and the mirrors). Read once per invocation (`run_query_once`), and not at all while the
    subscriptions' generation (`subscriptions_generation`) is the one on the stamp of `stamped`
    (the model that applies them): the stamp's fingerprint is then the answer.
-#}
{% macro subscriptions_fingerprint(relation, stamped=none) %}
    {%- if not execute -%}
        {{ return(none) }}
    {%- elif relation is none -%}
        {{ return('none') }}
    {%- endif -%}
    {%- set stamp = seq_stamp(stamped) if stamped is not none else none -%}
    {%- set generation = subscriptions_generation(relation) -%}
    {%- if stamp is not none and generation is not none and stamp.subscriptions_generation == generation -%}
        {{ return(stamp.subscriptions) }}
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

{#-
    A token that changes whenever the subscriptions `relation` (the int_consumer_subscriptions
    view) can: the view's own checksum in the manifest and the `table_generation` of each table it
    reads (the consumers seed), joined by `/`. None when it reads anything but tables (nothing to
    vouch for it), when it is not in the graph, or when not executing.
-#}
{% macro subscriptions_generation(relation) %}
    {%- if not execute or relation is none -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set view = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
        | selectattr('alias', 'equalto', relation.identifier) | selectattr('schema', 'equalto', relation.schema)
        | first -%}
    {%- if view is not defined or view is none -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set inputs = [] -%}
    {%- for input in view.depends_on.nodes -%}
        {%- set node = graph.nodes.get(input) -%}
        {%- if node is none or node.config.materialized not in ('seed', 'table', 'incremental') -%}
            {{ return(none) }}
        {%- endif -%}
        {%- do inputs.append(node) -%}
    {%- endfor -%}
    {%- set tables = nodes_generation(inputs) -%}
    {{ return(none if tables is none else view.checksum.checksum[:16] ~ '/' ~ tables) }}
{% endmacro %}
