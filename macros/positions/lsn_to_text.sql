{#- Renders a bigint LSN the way Postgres writes it, `X/Y` in upper-case hex (`16/B374D848`). -#}
{% macro lsn_to_text(lsn) -%}
    case
        when {{ lsn }} is not null
            then concat(
                upper(hex(shiftright(cast({{ lsn }} as bigint), 32))),
                '/',
                upper(hex(cast({{ lsn }} as bigint) & 4294967295))
            )
    end
{%- endmacro %}
