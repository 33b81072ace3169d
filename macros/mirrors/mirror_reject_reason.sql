{#-
    SQL giving why a value (`raw`: the text the capture sent, SQL) that `mirror_value` does not
    convert to `spark_type` is not in the mirror, for mirror_rejects. The cases that are not the
    value's fault but Spark's limits are named (a BC date, `±infinity` as text or as Debezium's
    epoch sentinels, `connect_infinity`, more fraction or integer
    digits than the decimal holds, a JSON number of more than 38 digits, a multi-dimensional array,
    an element that does not convert);
    anything else does not convert: from its Connect type (Debezium) or as text (Postgres).
-#}
{% macro mirror_reject_reason(raw, spark_type, source_type) -%}
    {%- set type = spark_type | lower | trim -%}
    {%- set digits = modules.re.match('^decimal[(]([0-9]+),([0-9]+)[)]$', type) -%}
    {%- set decoding = connect_encoding(source_type) -%}
    {%- set encoding = decoding.encoding if decoding else 'postgres' -%}
    case
        when {{ raw }} is null then null
        {%- if encoding in ('postgres', 'text') %}
            {%- if type in ('date', 'timestamp', 'timestamp_ntz') %}
        when {{ raw }} rlike ' BC$' then 'a BC date: the mirror holds dates from the year 1 on'
        when {{ raw }} in ('infinity', '-infinity')
            then concat({{ raw }}, ' has no date or timestamp value: not moved to one')
            {%- elif digits %}
        when {{ raw }} rlike '^[+-]?[0-9]+([.][0-9]+)?$'
            and length(regexp_extract({{ raw }}, '[.]([0-9]*?)0*$', 1)) > {{ digits.group(2) }}
            then 'more fraction digits than {{ type }} holds: not rounded'
        when {{ raw }} rlike '^[+-]?[0-9]+([.][0-9]+)?$'
            then 'more integer digits than {{ type }} holds'
            {%- elif type == 'variant' %}
        when {{ mirror_json_lossy(raw) }}
            then 'a JSON number of more than 38 digits: a variant would hold it as a double'
            {%- elif type.startswith('array<') and encoding == 'postgres' %}
        when {{ raw }} rlike '^([\\[]|[{]\\s*[{])'
            then 'a multi-dimensional array or one with explicit bounds: {{ type }} holds one dimension'
        when left({{ raw }}, 1) = '{' and right({{ raw }}, 1) = '}'
            then 'an element does not convert to {{ type[6:-1] }}'
            {%- endif %}
        {%- elif encoding in ('epoch_days', 'epoch_millis', 'epoch_micros', 'epoch_nanos') %}
            {%- for name, number in connect_infinity(encoding).items() %}
        when {{ raw }} = '{{ number }}' then '{{ name }} has no date or timestamp value: not moved to one'
            {%- endfor %}
            {%- if encoding != 'epoch_nanos' %}
            {# The first instant of the year 1, in the encoding's unit (nanos cannot reach it). #}
        when try_cast({{ raw }} as bigint) < {{ {'epoch_days': -719162, 'epoch_millis': -62135596800000,
            'epoch_micros': -62135596800000000}[encoding] }}
            then 'a BC date: the mirror holds dates from the year 1 on'
            {%- endif %}
        {%- endif %}
        {%- if encoding == 'postgres' %}
        else 'does not convert to {{ type }}'
        {%- else %}
        else concat('does not convert from ', {{ sql_string(source_type or '') }}, ' to {{ type }}')
        {%- endif %}
    end
{%- endmacro %}
