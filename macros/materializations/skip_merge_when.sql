{#-
    Marks this model's merge, for this dbt invocation, as having nothing to apply when
    `nothing_new` is true: the project's incremental materialization (`merge_skipped`) then runs
    the model's hooks and nothing else, so the run makes no Delta commit, and Spark neither plans
    the model's select nor checks its schema; a merge of an empty set would run every stage of the
    select, then commit a version that changes nothing.
    The caller decides from what it read before rendering (a model reading by seq: no seq past the
    one stamped on its last commit); only an incremental run may skip. Only in a run that writes
    (`writes_this_model`).
    The mark lives in the manifest's flat graph (`graph`), which the model's rendering and its
    materialization share, keyed by the invocation as `run_query_once` keys its answers.
-#}
{% macro skip_merge_when(nothing_new) %}
    {%- if writes_this_model() -%}
        {%- set marks = graph.setdefault('wal_lake_skipped_merges', {}) -%}
        {%- do marks.update({model.unique_id: invocation_id if nothing_new else none}) -%}
        {%- if nothing_new -%}
            {%- do log(model.name ~ ': nothing new to merge, no merge run', info=false) -%}
        {%- endif -%}
    {%- endif -%}
{% endmacro %}

{#- Whether `skip_merge_when` marked this model's merge in this invocation. -#}
{% macro merge_skipped() %}
    {%- set marks = graph.get('wal_lake_skipped_merges', {}) -%}
    {{ return(execute and marks.get(model.unique_id) == invocation_id) }}
{% endmacro %}
