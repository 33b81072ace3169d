{#-
    True when a mirror column of Spark type `from_type` can take `to_type` in place (Delta's type
    widening): a wider integer, float to double, an integer to a decimal with room for it, or a
    decimal with at least as many digits on each side of the point. Both are spark_type_for
    strings, compared when the model renders.
-#}
{% macro mirror_type_widens(from_type, to_type) -%}
    {%- set integers = ['tinyint', 'smallint', 'int', 'bigint'] -%}
    {%- set integer_digits = {'tinyint': 3, 'smallint': 5, 'int': 10, 'bigint': 20} -%}
    {%- set from_type = from_type | lower | trim -%}
    {%- set to_type = to_type | lower | trim -%}
    {%- set to_decimal = modules.re.match('^decimal[(]([0-9]+),([0-9]+)[)]$', to_type) -%}
    {%- set from_decimal = modules.re.match('^decimal[(]([0-9]+),([0-9]+)[)]$', from_type) -%}
    {%- if from_type == to_type -%}
        {{ return(false) }}
    {%- elif from_type in integers and to_type in integers -%}
        {{ return(integers.index(to_type) > integers.index(from_type)) }}
    {%- elif from_type == 'float' and to_type == 'double' -%}
        {{ return(true) }}
    {%- elif from_type in integers and to_decimal -%}
        {%- set precision, scale = to_decimal.group(1) | int, to_decimal.group(2) | int -%}
        {{ return(precision - scale >= integer_digits[from_type]) }}
    {%- elif from_decimal and to_decimal -%}
        {%- set from_precision, from_scale = from_decimal.group(1) | int, from_decimal.group(2) | int -%}
        {%- set to_precision, to_scale = to_decimal.group(1) | int, to_decimal.group(2) | int -%}
        {{ return(to_scale >= from_scale and to_precision - to_scale >= from_precision - from_scale) }}
    {%- endif -%}
    {{ return(false) }}
{%- endmacro %}
