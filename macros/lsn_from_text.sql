{#- Parses Postgres's `X/Y` LSN text into the bigint `(X << 32) | Y` that tables store. -#}
{% macro lsn_from_text(lsn_text) -%}
    (
        shiftleft(cast(conv(split_part({{ lsn_text }}, '/', 1), 16, 10) as bigint), 32)
        | cast(conv(split_part({{ lsn_text }}, '/', 2), 16, 10) as bigint)
    )
{%- endmacro %}
