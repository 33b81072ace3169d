{#-
    The first post-hook of a model that reads by seq (the second clears the mark:
    `unstamp_consumed_seq`). When the run's merge wrote nothing, because its range held nothing for
    this model (a mirror whose table the range did not touch, a range with no value to reject, no
    subscribed table touched), Delta made no commit, and the model's last stamp still names the seq
    before the range: every later run would read the range again, a range that only grows while the
    model has nothing to write. A commit of one table property (`wal_lake.consumed_seq`, the run's
    upto) then carries the run's mark instead; likewise for sequin_events' mark
    (`consumed_mark`) when every change its run read was a replay, and sequin_violations'
    (`checked_mark`) when the batches it checked held no violation. Nothing to do when the table's latest commit already
    carries the mark (the merge's own, or an earlier run's with the same upto whose merge was
    skipped), or when no mark is set (not a run that writes). A skipped merge's run reads that
    latest commit from the history the model read while it rendered (`history_read_before_run`).
-#}
{% macro stamp_unwritten_run() %}
    {%- if writes_this_model() -%}
        {%- set mark = run_query('set spark.databricks.delta.commitInfo.userMetadata').rows[0][1] -%}
        {%- set stamp = parse_seq_stamp(mark) -%}
        {%- if stamp is not none -%}
            {%- set property = ('wal_lake.consumed_seq', stamp.consumed_seq) -%}
        {%- elif mark.startswith(consumed_mark_prefix()) -%}
            {#- sequin_events' mark (consumed_mark): the run read only replays. -#}
            {%- set property = ('wal_lake.consumed_positions', 'on this commit') -%}
        {%- elif mark.startswith(checked_mark_prefix()) -%}
            {#- sequin_violations' mark (checked_mark): the batches held no violation. -#}
            {%- set property = ('wal_lake.checked_batches', 'on this commit') -%}
        {%- else -%}
            {%- set property = none -%}
        {%- endif -%}
        {%- if property is not none -%}
            {%- set table = real_table(this) -%}
            {#-
                A skipped merge committed nothing, nor did the run before it: the table's latest
                commit is the newest of the history the model read while it rendered, when it did.
            -#}
            {%- set read = history_read_before_run(this) if merge_skipped() else none -%}
            {%- set latest = read if read is not none else run_query('describe history ' ~ table ~ ' limit 1') -%}
            {%- set last = latest.rows[0]['userMetadata'] -%}
            {%- if last != mark -%}
                {%- do run_query(
                    'alter table ' ~ table ~ " set tblproperties ('" ~ property[0] ~ "' = '" ~ property[1] ~ "')"
                ) -%}
            {%- elif read is not none -%}
                {#- Nothing committed in this run: the models after it read the same history. -#}
                {%- do keep_history_after_unwritten_run(this, read) -%}
            {%- endif -%}
        {%- endif -%}
    {%- endif -%}
{% endmacro %}
