{#- The rows of `consumed_positions` as an inline relation (empty, typed, when there are none). -#}
{% macro consumed_positions_relation(rows) -%}
    {%- if rows -%}
        select * from values
        {%- for row in rows %}
            (
                {{ sql_string(row.source_id) }},
                cast({{ row.batch_id }} as bigint),
                cast({{ row.commit_lsn }} as bigint),
                {{ row.commit_idx }}
            ){{ ',' if not loop.last }}
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
