{#-
    A dict kept for one dbt invocation under `name`, for what a consumer model reads from the
    warehouse more than once in a run: its stamp, sequin_events' table id and the subscriptions'
    fingerprint are asked while the model renders (is_incremental(), consumer_run_bounds) and again
    by the materialization (should_full_refresh). Both contexts share the manifest's flat graph
    (`graph`), so the dict lives there; it is emptied when a later invocation in the same process (a
    dbtRunner call after another) first asks.
-#}
{% macro invocation_cache(name) %}
    {%- set store = graph.setdefault('wal_lake_invocation_cache', {}) -%}
    {%- if store.get('invocation_id') != invocation_id -%}
        {%- do store.clear() -%}
        {%- do store.update({'invocation_id': invocation_id}) -%}
    {%- endif -%}
    {{ return(store.setdefault(name, {})) }}
{% endmacro %}
