{#-
    events_past's `transactions` as an inline relation (source_id, commit_lsn, first_idx,
    seq_offset), the shape of sequin_events' `transaction_offsets`; empty, typed, when the run's
    transactions are all replays.
-#}
{% macro transaction_offsets_relation(transactions) -%}
    {%- set literals = [] -%}
    {%- for row in transactions -%}
        {%- do literals.append([
            sql_string(row.source_id), row.commit_lsn ~ 'L', row.first_idx, row.seq_offset ~ 'L',
        ]) -%}
    {%- endfor -%}
    {{ inline_relation(
        'transaction_offsets',
        [('source_id', 'string'), ('commit_lsn', 'bigint'), ('first_idx', 'int'), ('seq_offset', 'bigint')],
        literals,
    ) }}
{%- endmacro %}
