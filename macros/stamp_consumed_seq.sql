{#-
    SQL that marks every Delta commit of this session, until `unstamp_consumed_seq`, with the seq a
    consumer model applies up to (commit user metadata read back by `consumed_seq`).
-#}
{% macro stamp_consumed_seq(seq) %}
    set spark.databricks.delta.commitInfo.userMetadata = wal_lake.consumed_seq={{ seq }}
{% endmacro %}
