{#-
    `run_query(sql)`, asked of the warehouse once per dbt invocation: a later call with the same SQL
    text in the same invocation gets the first answer. For what a model that reads by seq reads more than
    once in a run and what the run itself does not change before it asks again: its stamp (`describe
    history`), sequin_events' table id and the subscriptions' fingerprint are read while the model
    renders (is_incremental(), fold_run_bounds) and again by the materialization
    (should_full_refresh), before the model's own commit. Both contexts share the manifest's flat
    graph (`graph`), so the answers live there; they are dropped when a later invocation in the same
    process (a dbtRunner call after another) first asks.
    `key`: the answer's name instead of the SQL text, for a question asked again after something in
    the run changed its answer (a model's stamp read by the models after it).
-#}
{% macro run_query_once(sql, key=none) %}
    {%- set key = sql if key is none else key -%}
    {%- set answers = answers_of_this_invocation() -%}
    {%- if key not in answers -%}
        {%- do answers.update({key: run_query(sql)}) -%}
    {%- endif -%}
    {{ return(answers[key]) }}
{% endmacro %}

{#-
    The answer `run_query_once` got for `sql` in this dbt invocation, or none when it was not asked
    (nothing is run).
-#}
{% macro answered_once(sql) %}
    {{ return(answers_of_this_invocation().get(sql)) }}
{% endmacro %}

{#- The answers `run_query_once` got in this invocation, by key; an earlier invocation's are dropped. -#}
{% macro answers_of_this_invocation() %}
    {%- set store = graph.setdefault('wal_lake_run_query_once', {}) -%}
    {%- if store.get('invocation_id') != invocation_id -%}
        {%- do store.clear() -%}
        {%- do store.update({'invocation_id': invocation_id, 'answers': {}}) -%}
    {%- endif -%}
    {{ return(store['answers']) }}
{% endmacro %}
