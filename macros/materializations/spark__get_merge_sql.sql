{#-
    Overrides dbt-spark's merge for this project. dbt-spark's own merge has no delete branch and the
    Spark adapter never dispatches custom incremental strategies, so the project replaces the
    adapter's merge SQL macro instead. Two configs, both optional:

    - `merge_delete_column`: a boolean column of the model's select. Source rows where it is true
      delete the matching target row (and are never inserted). The column is not written to the
      target: models select it only when `is_incremental()`.
    - `merge_update`: false turns the merge into insert-only (rows already in the target are never
      touched: `sequin_events` uses it so an assigned `seq` can never change).

    Columns are written by name from the target's column list, so source-only helper columns are
    ignored. A predicate the model set on its target rows for this run (`merge_target_predicate`)
    joins the merge condition, and expressions it set for some columns (`merge_update_expressions`)
    replace the source's value in the update branch. Without these configs it behaves like
    dbt-spark's merge. A run with nothing new (`skip_merge_when`) never gets here: the project's
    incremental materialization stops before it.
-#}
{% macro spark__get_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) %}
    {%- set predicates = [] if incremental_predicates is none else [] + incremental_predicates -%}
    {%- set dest_columns = adapter.get_columns_in_relation(target) -%}
    {%- set delete_column = config.get('merge_delete_column') -%}
    {%- set do_update = config.get('merge_update', true) -%}
    {%- set insert_columns = dest_columns | map(attribute='quoted') | list -%}
    {#- dbt-spark's get_merge_update_columns returns none for "all columns". -#}
    {%- set update_columns = get_merge_update_columns(
        config.get('merge_update_columns'), config.get('merge_exclude_columns'), dest_columns
    ) or insert_columns -%}
    {%- set keys = [] if unique_key is none else (
        [unique_key] if unique_key is string else unique_key
    ) -%}
    {%- for key in keys -%}
        {%- do predicates.append('DBT_INTERNAL_SOURCE.' ~ key ~ ' = DBT_INTERNAL_DEST.' ~ key) -%}
    {%- endfor -%}
    {%- if not predicates -%}{%- do predicates.append('FALSE') -%}{%- endif %}
    {%- set target_predicate = merge_target_predicate_set() -%}
    {%- set update_expressions = merge_update_expressions_set() or {} -%}
    {%- if target_predicate -%}{%- do predicates.append('(' ~ target_predicate ~ ')') -%}{%- endif %}

    {{ sql_header if sql_header is not none }}

    merge into {{ target }} as DBT_INTERNAL_DEST
    using {{ source }} as DBT_INTERNAL_SOURCE
    on {{ predicates | join(' and ') }}
    {%- if delete_column %}
    when matched and DBT_INTERNAL_SOURCE.{{ delete_column }} then delete
    {%- endif %}
    {%- if do_update %}
    when matched then update set
        {%- for column_name in update_columns %}
        {%- set expression = update_expressions.get(column_name | replace('`', '')) %}
        {{ column_name }} = {{ expression or 'DBT_INTERNAL_SOURCE.' ~ column_name }}{{ ',' if not loop.last }}
        {%- endfor %}
    {%- endif %}
    when not matched {%- if delete_column %} and not DBT_INTERNAL_SOURCE.{{ delete_column }}{% endif %} then insert
        ({{ insert_columns | join(', ') }})
        values (
        {%- for column_name in insert_columns %}
            DBT_INTERNAL_SOURCE.{{ column_name }}{{ ',' if not loop.last }}
        {%- endfor %}
        )
{% endmacro %}
