{#- SQL that ends `stamp_consumed_seq`: later commits of the session carry no mark. -#}
{% macro unstamp_consumed_seq() %}
    reset spark.databricks.delta.commitInfo.userMetadata
{% endmacro %}
