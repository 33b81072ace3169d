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

{#- The rows of `consumed_positions` as an inline relation (empty, typed, when there are none). -#}
{% macro consumed_positions_relation(rows) -%}
    {%- if rows -%}
        select * from values
        {%- for row in rows %}
            ('{{ row.source_id | replace("'", "''") }}', cast({{ row.batch_id }} as bigint), cast({{ row.commit_lsn }} as bigint), {{ row.commit_idx }}){{ ',' if not loop.last }}
        {%- endfor %}
            as consumed (source_id, batch_id, commit_lsn, commit_idx)
    {%- else -%}
        select
            cast(null as string) as source_id,
            cast(null as bigint) as batch_id,
            cast(null as bigint) as commit_lsn,
            cast(null as int) as commit_idx
        where false
    {%- endif -%}
{%- endmacro %}
