{#-
    SQL that turns one value of a record (`raw`: the text the capture sent, SQL) into `spark_type`
    (a Spark type as spark_type_for writes it, known when the model renders). Null when the text
    does not convert: mirror_rejects records those, so a null in a mirror is either a source null
    or a listed reject.
    - timestamp (with time zone): a bare `+hh` offset, as Postgres writes it, is widened to `+hh:00`;
    - variant: the JSON text parsed (json, jsonb);
    - binary: bytea's hex text (`\x0a0b`, or without the `\x`);
    - array<T>: a one-dimensional Postgres array literal (`{1,2,NULL}`, `{"a b","c,d"}`), each
      element converted to T; null when any element does not convert or the array has more
      dimensions;
    - every other type: Spark's cast of the text (`NaN` and `±Infinity` for float and double).
-#}
{% macro mirror_value(raw, spark_type) -%}
    {%- set type = spark_type | lower | trim -%}
    {%- if type == 'string' -%}
        {{ raw }}
    {%- elif type == 'timestamp' -%}
        try_cast(regexp_replace({{ raw }}, '([+-][0-9]{2})$', '$1:00') as timestamp)
    {%- elif type == 'variant' -%}
        try_parse_json({{ raw }})
    {%- elif type == 'binary' -%}
        case when left({{ raw }}, 2) = '\\x' then unhex(substr({{ raw }}, 3)) else unhex({{ raw }}) end
    {%- elif type.startswith('array<') and type.endswith('>') -%}
        {%- set element_type = type[6:-1] -%}
        {%- set elements -%}
            transform(
                regexp_extract_all(substr({{ raw }}, 2, length({{ raw }}) - 2), '"(?:[^"\\\\]|\\\\.)*"|[^,]+', 0),
                token -> case
                    when token = 'NULL' then null
                    when token like '"%' then regexp_replace(substr(token, 2, length(token) - 2), '\\\\(.)', '$1')
                    else token
                end
            )
        {%- endset -%}
        case
            when
                {{ raw }} rlike '^[{][^{]*[}]$'
                and forall({{ elements }}, element -> element is null or {{ mirror_value('element', element_type) }} is not null)
                then transform({{ elements }}, element -> {{ mirror_value('element', element_type) }})
        end
    {%- else -%}
        try_cast({{ raw }} as {{ type }})
    {%- endif -%}
{%- endmacro %}
