{#-
    SQL over a type text ending in `(p,s)` (`numeric(12,2)`, `…Decimal(12,2)`): `decimal(p,s)` when
    Spark's decimal holds it (precision 1 to 38, scale at most the precision), else `string`.
-#}
{% macro decimal_spark_type(text) -%}
    {%- set precision = "cast(regexp_extract(" ~ text ~ ", '[(]([0-9]+),[0-9]+[)]$', 1) as int)" -%}
    {%- set scale = "cast(regexp_extract(" ~ text ~ ", '[(][0-9]+,([0-9]+)[)]$', 1) as int)" -%}
    case
        when {{ precision }} between 1 and 38 and {{ scale }} <= {{ precision }}
            then concat('decimal(', {{ precision }}, ',', {{ scale }}, ')')
        else 'string'
    end
{%- endmacro %}
