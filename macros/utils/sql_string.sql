{#-
    `value` as a Spark SQL string literal. Spark reads a backslash in a literal as an escape
    (`'a\b'` is "a" and a backspace), so doubling a quote alone is not enough for a name or value
    sent by a source: both the backslash and the quote are escaped.
-#}
{% macro sql_string(value) -%}
    {{- return("'" ~ (value | string) | replace('\\', '\\\\') | replace("'", "\\'") ~ "'") -}}
{%- endmacro %}
