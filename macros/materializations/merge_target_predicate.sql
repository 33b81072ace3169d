{#-
    A predicate on the merge's target rows (`DBT_INTERNAL_DEST`) that only rows the model's select
    can match pass, set for this dbt invocation: `spark__get_merge_sql` adds it to the merge
    condition, so Delta's file statistics skip the target's files outside it and the merge reads
    only what it may match (Delta's guidance for a merge: reduce the search space). Delta still
    checks a concurrent write against it: a run that adds rows inside it fails the merge, as a
    write anywhere in the table did before. None clears it. Only in a run that writes
    (`writes_this_model`); an `invocation_mark`, as `skip_merge_when`'s is.
-#}
{% macro merge_target_predicate(predicate) %}
    {%- do set_invocation_mark('merge_target_predicates', predicate) -%}
{% endmacro %}

{#- The predicate `merge_target_predicate` set for this model in this invocation, or none. -#}
{% macro merge_target_predicate_set() %}
    {{ return(invocation_mark('merge_target_predicates')) }}
{% endmacro %}
