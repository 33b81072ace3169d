{#-
    SQL that turns one value of a record (`raw`: the text the capture sent, SQL) into `spark_type`
    (a Spark type as spark_type_for writes it, known when the model renders), decoding it first as
    its column's `source_type` says (`connect_encoding`: Debezium's encodings; none for wal2json's
    Postgres text). Null when the text does not convert: mirror_rejects records those, so a null in
    a mirror is either a source null or a listed reject.

    Postgres text (wal2json, and Debezium values sent as text):
    - timestamp (with time zone): a bare `+hh` offset, as Postgres writes it, is widened to `+hh:00`;
      ISO-8601 (`2026-01-01T10:00:00Z`, Debezium's ZonedTimestamp) is read as is;
    - variant: the JSON text parsed (json, jsonb);
    - binary: bytea's hex text (`\x0a0b`, or without the `\x`);
    - array<T>: a one-dimensional Postgres array literal (`{1,2,NULL}`, `{"a b","c,d"}`), each
      element converted to T; null when any element does not convert or the array has more
      dimensions;
    - every other type: Spark's cast of the text (`NaN` and `±Infinity` for float and double).
    Debezium's encodings, decoded to a value that is then cast to `spark_type` when it is another:
    - epoch_days -> date; epoch_millis/micros/nanos -> timestamp_ntz (a local date-time counted
      from 1970-01-01 00:00, whatever the session's time zone);
    - time_millis/micros/nanos -> the time of day as Postgres writes it (`10:00:00`, `10:00:00.5`);
    - base64 -> binary; decimal, variable_decimal -> the decimal's text;
    - json_array -> each item decoded as its own type; null when any item does not convert.
-#}
{% macro mirror_value(raw, spark_type, source_type=none) -%}
    {%- set type = spark_type | lower | trim -%}
    {%- set decoding = connect_encoding(source_type) -%}
    {%- set encoding = decoding.encoding if decoding else 'postgres' -%}
    {%- if encoding == 'json_array' and type.startswith('array<') and type.endswith('>') -%}
        {%- set element_type = type[6:-1] -%}
        {%- set items = "from_json(" ~ raw ~ ", 'array<string>')" -%}
        {%- set item = mirror_value('item', element_type, decoding['item']) -%}
        case
            when forall({{ items }}, item -> item is null or {{ item }} is not null)
                then transform({{ items }}, item -> {{ item }})
        end
    {%- elif encoding in ('epoch_days', 'epoch_millis', 'epoch_micros', 'epoch_nanos', 'time_millis',
        'time_micros', 'time_nanos', 'base64', 'decimal', 'variable_decimal') -%}
        {%- set number = "try_cast(" ~ raw ~ " as bigint)" -%}
        {%- set micros = {
            'epoch_millis': "try_multiply(" ~ number ~ ", 1000)", 'time_millis': "try_multiply(" ~ number ~ ", 1000)",
            'epoch_nanos': number ~ " div 1000", 'time_nanos': number ~ " div 1000",
        }.get(encoding, number) -%}
        {%- if encoding == 'epoch_days' -%}
            {%- set decoded, decoded_type = "date_add(date'1970-01-01', try_cast(" ~ raw ~ " as int))", 'date' -%}
        {%- elif encoding.startswith('epoch_') -%}
            {%- set decoded = "timestampadd(MICROSECOND, " ~ micros ~ ", timestamp_ntz'1970-01-01 00:00:00')" -%}
            {%- set decoded_type = 'timestamp_ntz' -%}
        {%- elif encoding.startswith('time_') -%}
            {%- set decoded -%}
                transform(array({{ micros }}), m -> case when m between 0 and 86400000000 then concat(
                    format_string('%02d:%02d:%02d', m div 3600000000, m div 60000000 % 60, m div 1000000 % 60),
                    regexp_replace(format_string('.%06d', m % 1000000), '[.]?0+$', '')
                ) end)[0]
            {%- endset -%}
            {%- set decoded_type = 'string' -%}
        {%- elif encoding == 'base64' -%}
            {%- set decoded, decoded_type = "try_to_binary(" ~ raw ~ ", 'base64')", 'binary' -%}
        {%- elif encoding == 'decimal' -%}
            {%- set decoded = connect_decimal_text("try_to_binary(" ~ raw ~ ", 'base64')", decoding.scale) -%}
            {%- set decoded_type = 'string' -%}
        {%- else -%}
            {%- set decoded = connect_decimal_text(
                "try_to_binary(get_json_object(" ~ raw ~ ", '$.value'), 'base64')",
                "try_cast(get_json_object(" ~ raw ~ ", '$.scale') as int)") -%}
            {%- set decoded_type = 'string' -%}
        {%- endif -%}
        {%- if decoded_type == type -%}
            {{ decoded }}
        {%- else -%}
            try_cast({{ decoded }} as {{ type }})
        {%- endif -%}
    {%- elif type == 'string' -%}
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
