{#-
    SQL that marks every Delta commit of this session, until `unstamp_consumed_seq`, with what a
    model that reads by seq applies: the seq it applies up to, the sequin_events table id that seq belongs
    to and the fingerprint of its consumers (`bounds` of `fold_run_bounds`), read back by
    `seq_stamp`; and the generations the bounds hold: sequin_events' (`fold_run_bounds`), the
    subscriptions' (`records_run_bounds`).
-#}
{% macro stamp_consumed_seq(bounds) %}
    {%- set mark = 'wal_lake.consumed_seq=' ~ bounds.upto ~ ',sequin_table_id=' ~ bounds.sequin_table_id
        ~ ',subscriptions=' ~ bounds.subscriptions
        ~ (',sequin_generation=' ~ bounds.sequin_generation if bounds.get('sequin_generation') else '')
        ~ (',subscriptions_generation=' ~ bounds.subscriptions_generation if bounds.get('subscriptions_generation') else '')
    %}
    set spark.databricks.delta.commitInfo.userMetadata = {{ mark }}
{% endmacro %}
