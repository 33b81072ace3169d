{#- An array of structs with a `seq` field (no two alike), in seq order. -#}
{% macro sort_by_seq(array) -%}
    array_sort(
        {{ array }},
        (l, r) -> case when l.seq < r.seq then -1 when l.seq > r.seq then 1 else 0 end
    )
{%- endmacro %}
