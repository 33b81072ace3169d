{#-
    events_past's `transactions` as an inline relation (source_id, commit_lsn, first_idx,
    seq_offset), the shape of sequin_events' `transaction_offsets`; empty, typed, when the run's
    transactions are all replays.
-#}
{% macro transaction_offsets_relation(transactions) -%}
    {%- if transactions -%}
        select * from values
        {%- for row in transactions %}
            ({{ sql_string(row.source_id) }}, {{ row.commit_lsn }}L, {{ row.first_idx }}, {{ row.seq_offset }}L){{ ',' if not loop.last }}
        {%- endfor %}
            as transaction_offsets (source_id, commit_lsn, first_idx, seq_offset)
    {%- else -%}
        select
            cast(null as string) as source_id,
            cast(null as bigint) as commit_lsn,
            cast(null as int) as first_idx,
            cast(null as bigint) as seq_offset
        where false
    {%- endif -%}
{%- endmacro %}
