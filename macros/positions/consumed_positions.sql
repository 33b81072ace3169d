{#-
    What sequin_events has already consumed, per source: the greatest batch it read and the
    greatest position it holds. Read from the mark on the table's own Delta commit
    (`consumed_stamp`: a `describe history`, whatever the log's size); when no commit carries a
    mark it can trust (a table written before marks, or changed since by a statement that is not a
    run of the model), aggregated over the whole table instead. Returns an empty list when the
    model does not exist yet or outside execution, so callers can render their full-refresh SQL.
    `after_its_run`: asked by a model after sequin_events in the same invocation (consumed_stamp).
-#}
{% macro consumed_positions(relation, after_its_run=false) %}
    {%- if not execute -%}
        {{ return([]) }}
    {%- endif -%}
    {%- set stamped = consumed_stamp(relation, after_its_run) -%}
    {%- if stamped is not none -%}
        {{ return(stamped) }}
    {%- endif -%}
    {%- set query -%}
        select
            source_id,
            max(batch_id) as batch_id,
            max(struct(commit_lsn, commit_idx)).commit_lsn as commit_lsn,
            max(struct(commit_lsn, commit_idx)).commit_idx as commit_idx
        from {{ relation }}
        group by source_id
    {%- endset -%}
    {{ return(run_query(query).rows) }}
{% endmacro %}
