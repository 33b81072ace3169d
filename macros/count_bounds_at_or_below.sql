{#-
    How many elements of `bounds`, an array sorted ascending, are at or below `value`: a binary
    search of `bits` halvings, so it reads log2 of the array's length, not all of it. `bounds` may
    hold at most 2^bits - 1 elements (more are not counted). The count never decreases as `value`
    grows, whatever the bounds: rows cut by it into ranges keep their order from range to range.
-#}
{% macro count_bounds_at_or_below(bounds, value, bits) -%}
    aggregate(
        sequence({{ bits - 1 }}, 0, -1),
        0,
        (found, bit) -> found + case
            when found + shiftleft(1, bit) > size({{ bounds }}) then 0
            when element_at({{ bounds }}, found + shiftleft(1, bit)) <= {{ value }} then shiftleft(1, bit)
            else 0
        end
    )
{%- endmacro %}
