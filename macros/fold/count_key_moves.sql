{#-
    How many changes of `relation` (sequin_events) moved a row to a new key (`is_key_change`).
    record_history renders its key-move steps only when there are some (the common case has none).
    0 when not executing. fold_run_bounds counts the moves of its seq range in the query that
    reads the range's end.
-#}
{% macro count_key_moves(relation) %}
    {%- if not execute -%}
        {{ return(0) }}
    {%- endif -%}
    {%- set query -%}
        select count(*) as moves from {{ relation }}
        where {{ is_key_change() }}
    {%- endset -%}
    {{ return(run_query(query).rows[0]['moves'] | int) }}
{% endmacro %}
