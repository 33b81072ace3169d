{#-
    Keeps one row per key: the one that sorts first by `order_by` (the first landed copy of a
    change, the latest frontier of a source), so every model breaks ties the same way.
    `relation` is anything that can follow `from` (a ref, a CTE name).
-#}
{% macro first_row_per_key(relation, partition_by, order_by) -%}
    select *
    from {{ relation }}
    qualify row_number() over (partition by {{ partition_by | join(', ') }} order by {{ order_by }}) = 1
{%- endmacro %}
