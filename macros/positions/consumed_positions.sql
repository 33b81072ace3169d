{#-
    What an incremental log model has already consumed, per source: the greatest landed batch and
    the greatest position. Returns an empty list when the model does not exist yet or outside
    execution, so callers can render their full-refresh SQL.
-#}
{% macro consumed_positions(relation) %}
    {%- if not execute -%}
        {{ return([]) }}
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
