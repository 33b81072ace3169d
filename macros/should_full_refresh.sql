{#-
    dbt's own `should_full_refresh` (it decides `is_incremental()` and the incremental
    materialization's rebuild), plus one rule: a consumer model (config `meta: {wal_lake_consumer:
    true}`) whose stamp no longer matches sequin_events or the consumers (`consumer_rebuild_reason`)
    rebuilds itself instead of applying seqs that name other changes. With `full_refresh: false`
    it refuses to run instead.
-#}
{% macro should_full_refresh() %}
    {%- set full_refresh = config.get('full_refresh') -%}
    {%- set never = full_refresh is sameas false -%}
    {%- if full_refresh is none -%}
        {%- set full_refresh = flags.FULL_REFRESH -%}
    {%- endif -%}
    {%- if full_refresh or not execute or not (config.get('meta') or {}).get('wal_lake_consumer') -%}
        {{ return(full_refresh) }}
    {%- endif -%}
    {%- if adapter.get_relation(this.database, this.schema, this.identifier) is none -%}
        {{ return(full_refresh) }}
    {%- endif -%}
    {#-
        `wal_lake_consumer: true` reads sequin_events for the consumers' subscriptions
        (consumer_records); a mapping names the model it reads by seq and whether subscriptions
        apply (`{reads: source_records, subscriptions: false}`: the mirrors).
    -#}
    {%- set consumer = config.get('meta').get('wal_lake_consumer') -%}
    {%- set reads = consumer.get('reads', 'sequin_events') if consumer is mapping else 'sequin_events' -%}
    {%- set subscribed = consumer.get('subscriptions', true) if consumer is mapping else true -%}
    {%- set reason = consumer_rebuild_reason(
        this, ref(reads), ref('int_consumer_subscriptions') if subscribed else none
    ) -%}
    {%- if reason and never -%}
        {{ exceptions.raise_compiler_error(
            this ~ ' must be rebuilt (' ~ reason ~ ') but has full_refresh: false; run it with --full-refresh'
        ) }}
    {%- elif reason -%}
        {%- if flags.WHICH in ('run', 'build') -%}
            {{ log(this ~ ': ' ~ reason ~ '; rebuilding it in full', info=true) }}
        {%- endif -%}
        {{ return(true) }}
    {%- endif -%}
    {{ return(full_refresh) }}
{% endmacro %}
