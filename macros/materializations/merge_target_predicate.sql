{#-
    A predicate on the merge's target rows (`DBT_INTERNAL_DEST`) that only rows the model's select
    can match pass, set for this dbt invocation: `spark__get_merge_sql` adds it to the merge
    condition, so Delta's file statistics skip the target's files outside it and the merge reads
    only what it may match (Delta's guidance for a merge: reduce the search space). Delta still
    checks a concurrent write against it: a run that adds rows inside it fails the merge, as a
    write anywhere in the table did before. None clears it. Only in a run that writes
    (`writes_this_model`); kept in the manifest's flat graph as `skip_merge_when` keeps its mark.
-#}
{% macro merge_target_predicate(predicate) %}
    {%- if writes_this_model() -%}
        {%- set marks = graph.setdefault('wal_lake_merge_target_predicates', {}) -%}
        {%- do marks.update({model.unique_id: [invocation_id, predicate]}) -%}
    {%- endif -%}
{% endmacro %}

{#- The predicate `merge_target_predicate` set for this model in this invocation, or none. -#}
{% macro merge_target_predicate_set() %}
    {%- set mark = graph.get('wal_lake_merge_target_predicates', {}).get(model.unique_id) -%}
    {{ return(mark[1] if execute and mark and mark[0] == invocation_id else none) }}
{% endmacro %}
