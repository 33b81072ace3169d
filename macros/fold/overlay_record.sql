{#-
    A record with the columns of `changes` laid over `base`: what an update that sent only some
    columns leaves behind. Either side may be null (nothing known, nothing sent).
-#}
{% macro overlay_record(base, changes) -%}
    case
        when {{ base }} is null then {{ changes }}
        when {{ changes }} is null then {{ base }}
        else map_concat(map_filter({{ base }}, (k, v) -> not map_contains_key({{ changes }}, k)), {{ changes }})
    end
{%- endmacro %}
