{#-
    dbt's own `should_full_refresh` (it decides `is_incremental()` and the incremental
    materialization's rebuild), plus one rule: a model that reads another by seq (config
    `meta: {wal_lake_reads_by_seq: {reads: <model>, subscriptions: <bool>}}`) whose stamp no longer
    matches the model it reads or the consumers (`rebuild_reason`) rebuilds itself instead of
    applying seqs that name other changes; so does sequin_violations (`meta: {wal_lake_checks_sequin:
    true}`) when its mark is missing or names another sequin_events (`checked_rebuild_reason`).
    So does such a model whose table lacks the column its layout rests on (`requires_column` in that
    meta: record_history's `is_current`, its partition), as a table an earlier version built does.
    With `full_refresh: false` it refuses to run instead.
-#}
{% macro should_full_refresh() %}
    {%- set full_refresh = config.get('full_refresh') -%}
    {%- set never = full_refresh is sameas false -%}
    {%- if full_refresh is none -%}
        {%- set full_refresh = flags.FULL_REFRESH -%}
    {%- endif -%}
    {%- set meta = config.get('meta') or {} -%}
    {%- set reader = meta.get('wal_lake_reads_by_seq') -%}
    {%- set checker = meta.get('wal_lake_checks_sequin') -%}
    {%- if full_refresh or not execute or not (reader or checker) -%}
        {{ return(full_refresh) }}
    {%- endif -%}
    {%- if adapter.get_relation(this.database, this.schema, this.identifier) is none -%}
        {{ return(full_refresh) }}
    {%- endif -%}
    {%- if checker -%}
        {#- sequin_violations, built a batch range at a time against sequin_events. -#}
        {%- set reason = checked_rebuild_reason(this, ref('sequin_events')) -%}
    {%- else -%}
        {#-
            source_records reads sequin_events; consumer_records reads source_records for the
            consumers' subscriptions; the mirrors and mirror_rejects read it without.
        -#}
        {%- set reason = rebuild_reason(
            this,
            ref(reader['reads']),
            ref('int_consumer_subscriptions') if reader['subscriptions'] else none
        ) -%}
    {%- endif -%}
    {%- set layout_column = (reader or {}).get('requires_column') -%}
    {%- if not reason and layout_column -%}
        {%- set columns = adapter.get_columns_in_relation(this) | map(attribute='name') | list -%}
        {%- if layout_column not in columns -%}
            {%- set reason = 'it has no ' ~ layout_column ~ ' column (built by an earlier version)' -%}
        {%- endif -%}
    {%- endif -%}
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
