{#-
    What the merge's update branch writes into some of the target's columns in this dbt invocation,
    instead of the source row's value: a dict of column name -> SQL over `DBT_INTERNAL_SOURCE` and
    `DBT_INTERNAL_DEST`. `spark__get_merge_sql` writes every other column from the source row, and
    the insert branch always does. None clears it. source_records sets it to lay the updates of a
    run over the stored record. Only in a run that writes (`writes_this_model`); an
    `invocation_mark`, as `merge_target_predicate`'s is.
-#}
{% macro merge_update_expressions(expressions) %}
    {%- do set_invocation_mark('merge_update_expressions', expressions) -%}
{% endmacro %}

{#- The expressions `merge_update_expressions` set for this model in this invocation, or none. -#}
{% macro merge_update_expressions_set() %}
    {{ return(invocation_mark('merge_update_expressions')) }}
{% endmacro %}
