{#-
    The greatest sequin_events seq a consumer model has applied. The model stamps it on its own
    Delta commit (commit user metadata `wal_lake.consumed_seq=N`, set by `stamp_consumed_seq`), so
    the mark is written in the same atomic commit as the rows: a crash leaves both or neither.
    Falls back to the greatest seq in the table when no stamped commit is found.
-#}
{% macro consumed_seq(relation) %}
    {%- if not execute -%}
        {{ return(0) }}
    {%- endif -%}
    {%- set history = run_query('describe history ' ~ relation ~ ' limit 50') -%}
    {%- for row in history.rows -%}
        {%- set metadata = row['userMetadata'] -%}
        {%- if metadata and metadata.startswith('wal_lake.consumed_seq=') -%}
            {{ return(metadata.split('=')[1] | int) }}
        {%- endif -%}
    {%- endfor -%}
    {%- set fallback = run_query('select coalesce(max(seq), 0) as seq from ' ~ relation) -%}
    {{ return(fallback.rows[0]['seq'] | int) }}
{% endmacro %}
