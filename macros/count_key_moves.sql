{#-
    How many changes of `relation` (sequin_events) in the seq range (above, upto] moved a row to a
    new key (`is_key_change`); the whole table without bounds. The models render their key-move
    steps only when there are some (the common case has none). 0 when not executing.
-#}
{% macro count_key_moves(relation, above=none, upto=none) %}
    {%- if not execute -%}
        {{ return(0) }}
    {%- endif -%}
    {%- set query -%}
        select count(*) as moves from {{ relation }}
        where {{ is_key_change() }}
        {%- if above is not none %} and seq > {{ above }}{% endif %}
        {%- if upto is not none %} and seq <= {{ upto }}{% endif %}
    {%- endset -%}
    {{ return(run_query(query).rows[0]['moves'] | int) }}
{% endmacro %}
