{#-
    SQL: true when the JSON text `raw` (SQL) holds a number that a variant cannot hold exactly.
    Spark's parse_json keeps a number as an integer or a decimal of up to 38 digits and turns a
    longer one into a double, silently; jsonb keeps any number exactly. Strings are taken out
    first (their digits are text), then every number is measured: more than 38 digits, leading
    zeros aside, or more than 38 after the point.
-#}
{% macro mirror_json_lossy(raw) -%}
    {%- set strings -%}"(?:[^"\\\\]++|\\\\.)*+"{%- endset -%}
    coalesce(exists(
        regexp_extract_all(regexp_replace({{ raw }}, '{{ strings }}', '""'), '[0-9]+(?:[.][0-9]+)?', 0),
        number -> length(regexp_replace(regexp_replace(number, '^0+', ''), '[.]', '')) > 38
            or length(regexp_extract(number, '[.]([0-9]+)', 1)) > 38
    ), false)
{%- endmacro %}
