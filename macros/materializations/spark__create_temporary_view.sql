{#-
    Overrides dbt-spark's temporary view, the relation an incremental run merges from. When
    `skip_merge_when` found nothing new, the merge reads nothing (`spark__get_merge_sql`): the view
    then holds the model's own table, empty, so Spark neither analyses nor plans the model's select
    for it, and the schema check sees the table's columns (a column the model gains reaches the
    table with the next run that has something to merge). Otherwise it is dbt-spark's view.
-#}
{% macro spark__create_temporary_view(relation, compiled_code) -%}
    create or replace temporary view {{ relation }} as
    {% if merge_skipped() -%}
        select * from {{ this }} where false
    {%- else -%}
        {{ compiled_code }}
    {%- endif %}
{%- endmacro %}
