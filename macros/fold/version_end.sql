{#-
    Where a record version ends: at its key's next touch or its table's next truncate, whichever
    comes first. `of` picks the end's `seq` or its commit time (`at`), from the columns
    next_touch_<of> and next_truncate_<of>.
-#}
{% macro version_end(of) -%}
    case
        when next_truncate_seq is not null and (next_touch_seq is null or next_truncate_seq < next_touch_seq)
            then next_truncate_{{ of }}
        else next_touch_{{ of }}
    end
{%- endmacro %}
