{#- The rows of `consumed_positions` as an inline relation (empty, typed, when there are none). -#}
{% macro consumed_positions_relation(rows) -%}
    {%- set literals = [] -%}
    {%- for row in rows -%}
        {%- do literals.append([
            sql_string(row.source_id), (row.batch_id | int) ~ 'L', (row.commit_lsn | int) ~ 'L', row.commit_idx | int,
        ]) -%}
    {%- endfor -%}
    {{ inline_relation(
        'consumed',
        [('source_id', 'string'), ('batch_id', 'bigint'), ('commit_lsn', 'bigint'), ('commit_idx', 'int')],
        literals,
    ) }}
{%- endmacro %}
