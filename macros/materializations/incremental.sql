{#-
    The project's incremental materialization: dbt-spark's own, except for a run whose merge
    `skip_merge_when` marked as having nothing new. Such a run writes nothing and makes no Delta
    commit, so it skips what only prepares a merge as well: the temporary view of the model's
    select, the two `describe` statements of the schema check, and the merge statement. Its hooks
    still run: a model's post-hooks stamp the run (`stamp_unwritten_run`) and clear its mark.
-#}
{% materialization incremental, adapter='spark', supported_languages=['sql', 'python'] -%}
    {%- if not merge_skipped() -%}
        {{ return(dbt.materialization_incremental_spark()) }}
    {%- endif -%}
    {{ run_hooks(pre_hooks) }}
    {%- do store_result('main', response='nothing new') -%}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [this]}) }}
{%- endmaterialization %}
