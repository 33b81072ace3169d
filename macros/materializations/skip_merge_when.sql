{#-
    Marks this model's merge, for this dbt invocation, as having nothing to apply when
    `nothing_new` is true: the project's incremental materialization (`merge_skipped`) then runs
    the model's hooks and nothing else, so the run makes no Delta commit, and Spark neither plans
    the model's select nor checks its schema; a merge of an empty set would run every stage of the
    select, then commit a version that changes nothing.
    The caller decides from what it read before rendering (a model reading by seq: no seq past the
    one stamped on its last commit); only an incremental run may skip. Only in a run that writes
    (`writes_this_model`).
    The mark is an `invocation_mark`: the model's rendering and its materialization share it.
-#}
{% macro skip_merge_when(nothing_new) %}
    {%- do set_invocation_mark('skipped_merges', true if nothing_new else false) -%}
    {%- if nothing_new and writes_this_model() -%}
        {%- do log(model.name ~ ': nothing new to merge, no merge run', info=false) -%}
    {%- endif -%}
{% endmacro %}

{#- Whether `skip_merge_when` marked this model's merge in this invocation. -#}
{% macro merge_skipped() %}
    {{ return(invocation_mark('skipped_merges') == true) }}
{% endmacro %}
