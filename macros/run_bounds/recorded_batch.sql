{#-
    The greatest batch_id column_registry (`relation`) has recorded, read before the model renders;
    0 when not executing. The model reads the batches landed after it with the number written in its
    SQL, so Delta skips the files of earlier batches while it plans the read; a subquery there is
    known only when the read runs, and every file of wal_events would be opened. Unit tests override it.
-#}
{% macro recorded_batch(relation) %}
    {%- if not execute -%}
        {{ return(0) }}
    {%- endif -%}
    {%- set query = 'select coalesce(max(last_batch_id), 0) as last_batch_id from ' ~ relation -%}
    {{ return(run_query(query).rows[0]['last_batch_id'] | int) }}
{% endmacro %}
