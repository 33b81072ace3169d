{#-
    A dict that lives for one dbt invocation, under `name`. dbt renders a model and then runs its
    materialization in two contexts that ask the same questions (is_incremental() while rendering,
    should_full_refresh() in the materialization, consumer_run_bounds in the model): what they read
    from the warehouse is kept here, so each fact costs one query per run. It is kept in the
    manifest's flat graph (`graph`), the one object both contexts share, and cleared when another
    invocation (a later dbtRunner call in the same process) first asks.
-#}
{% macro invocation_cache(name) %}
    {%- set store = graph.setdefault('wal_lake_invocation_cache', {}) -%}
    {%- if store.get('invocation_id') != invocation_id -%}
        {%- do store.clear() -%}
        {%- do store.update({'invocation_id': invocation_id}) -%}
    {%- endif -%}
    {{ return(store.setdefault(name, {})) }}
{% endmacro %}
