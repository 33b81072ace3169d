{#-
    The smallest Spark decimal that holds every value of two decimal types (`decimal(p,s)` texts,
    as spark_type_for writes them): as many integer digits and as many fraction digits as the wider
    of the two on each side (decimal(12,2) and decimal(12,4): decimal(14,4)). None when either is
    not a decimal or the result would need more than Spark's 38 digits.
-#}
{% macro mirror_decimal_union(first_type, second_type) -%}
    {%- set pattern = '^decimal[(]([0-9]+),([0-9]+)[)]$' -%}
    {%- set first = modules.re.match(pattern, (first_type or '') | lower | trim) -%}
    {%- set second = modules.re.match(pattern, (second_type or '') | lower | trim) -%}
    {%- if not (first and second) -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set scale = [first.group(2) | int, second.group(2) | int] | max -%}
    {%- set integer_digits = [
        (first.group(1) | int) - (first.group(2) | int), (second.group(1) | int) - (second.group(2) | int)
    ] | max -%}
    {%- if integer_digits + scale > 38 -%}
        {{ return(none) }}
    {%- endif -%}
    {{ return('decimal(' ~ (integer_digits + scale) ~ ',' ~ scale ~ ')') }}
{%- endmacro %}
