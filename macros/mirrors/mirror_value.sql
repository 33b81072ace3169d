{#-
    SQL that turns one value of a record (`raw`: the text the capture sent, SQL) into `spark_type`
    (a Spark type as spark_type_for writes it, known when the model renders), decoding it first as
    its column's `source_type` says (`connect_encoding`: Debezium's encodings; none for wal2json's
    Postgres text). Null when the text does not convert: mirror_rejects records those, so a null in
    a mirror is either a source null or a listed reject.

    Exact or null, never a different value: Spark's cast is lenient (it rounds a decimal, reads
    `0044-03-15 BC` as its first ten characters), so each text is first matched against the form
    Postgres writes for the type, and `mirror_reject_reason` says why one is not held.

    Postgres text (wal2json, and Debezium values sent as text):
    - decimal(p,s): a plain number with at most s fraction digits (trailing zeros aside) and at most
      p - s integer digits; never rounded;
    - date, timestamp_ntz, timestamp: `yyyy-mm-dd`, then ` hh:mm:ss[.ffffff]`, then (timestamp) an
      offset (`+hh`, widened to `+hh:00`, `+hh:mm`, `Z`; ISO-8601 `T` too, Debezium's
      ZonedTimestamp); a BC date or `±infinity` has no Spark value: null;
    - variant: the JSON text parsed (json, jsonb), unless a number in it has more than 38 digits,
      which a variant would hold as a double (`mirror_json_lossy`);
    - binary: bytea's hex text (`\x0a0b`, or without the `\x`);
    - array<T>: a one-dimensional Postgres array literal (`{1,2,NULL}`, `{"a b","c,d","{x}"}`), each
      element unquoted and converted to T; null when any element does not convert, or the array
      has more dimensions or explicit bounds (`{{1,2},{3,4}}`, `[0:1]={7,8}`);
    - every other type: Spark's cast of the text (`NaN` and `±Infinity` for float and double).
    Debezium's encodings, decoded to a value that is then converted to `spark_type` when it is
    another (a decoded decimal's text by the rule above):
    - epoch_days -> date; epoch_millis/micros/nanos -> timestamp_ntz (a local date-time counted
      from 1970-01-01 00:00, whatever the session's time zone); null before the year 1 and for
      Debezium's `±infinity` sentinels (`connect_infinity`);
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
            {%- set infinite = connect_infinity(encoding).values() | list -%}
            {%- set decoded -%}
                case when {{ raw }} not in ('{{ infinite | join("', '") }}')
                    then timestampadd(MICROSECOND, {{ micros }}, timestamp_ntz'1970-01-01 00:00:00') end
            {%- endset -%}
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
        {%- if decoded_type in ('date', 'timestamp_ntz') -%}
            {%- set decoded = "transform(array(" ~ decoded ~ "), d -> case when year(d) >= 1 then d end)[0]" -%}
        {%- endif -%}
        {%- if decoded_type == type -%}
            {{ decoded }}
        {%- elif decoded_type == 'string' -%}
            {{ mirror_value(decoded, type) }}
        {%- else -%}
            try_cast({{ decoded }} as {{ type }})
        {%- endif -%}
    {%- elif type == 'string' -%}
        {{ raw }}
    {%- elif type.startswith('decimal(') -%}
        {%- set digits = modules.re.match('^decimal[(]([0-9]+),([0-9]+)[)]$', type) -%}
        case
            when {{ raw }} rlike '^[+-]?[0-9]+([.][0-9]+)?$'
                and length(regexp_extract({{ raw }}, '[.]([0-9]*?)0*$', 1)) <= {{ digits.group(2) }}
                then try_cast({{ raw }} as {{ type }})
        end
    {%- elif type in ('date', 'timestamp_ntz', 'timestamp') -%}
        {%- set form = {
            'date': '^[0-9]{4,}-[0-9]{2}-[0-9]{2}$',
            'timestamp_ntz': '^[0-9]{4,}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?$',
            'timestamp': '^[0-9]{4,}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?(Z|[+-][0-9]{2}(:[0-9]{2}){0,2})$',
        }[type] -%}
        {%- set text = "regexp_replace(" ~ raw ~ ", '([+-][0-9]{2})$', '$1:00')" if type == 'timestamp' else raw -%}
        case when {{ raw }} rlike '{{ form }}' then try_cast({{ text }} as {{ type }}) end
    {%- elif type == 'variant' -%}
        case when not {{ mirror_json_lossy(raw) }} then try_parse_json({{ raw }}) end
    {%- elif type == 'binary' -%}
        case when left({{ raw }}, 2) = '\\x' then unhex(substr({{ raw }}, 3)) else unhex({{ raw }}) end
    {%- elif type.startswith('array<') and type.endswith('>') -%}
        {%- set element_type = type[6:-1] -%}
        {#-
            An element is quoted (any text, backslash escapes) or bare (none of `",{}` or a
            backslash; bare NULL is null). A one-dimensional literal is `{` elements `}` with one
            comma between each two and nothing else. Possessive quantifiers: Java's regex engine
            recurses per repetition of an alternation, which a long element would overflow.
        -#}
        {%- set element_form -%}"(?:[^"\\\\]++|\\\\.)*+"|[^",{}\\\\]++{%- endset -%}
        {%- set inner = "substr(" ~ raw ~ ", 2, length(" ~ raw ~ ") - 2)" -%}
        transform(array(regexp_extract_all({{ inner }}, '{{ element_form }}', 0)), tokens ->
            transform(array(transform(tokens, token -> case
                when token = 'NULL' then null
                when token like '"%' then regexp_replace(substr(token, 2, length(token) - 2), '\\\\(.)', '$1')
                else token
            end)), elements ->
                case
                    when
                        left({{ raw }}, 1) = '{' and right({{ raw }}, 1) = '}'
                        and regexp_replace({{ inner }}, '{{ element_form }}', '') = repeat(',', size(tokens) - 1)
                        and forall(elements, element -> element is null or {{ mirror_value('element', element_type) }} is not null)
                        then transform(elements, element -> {{ mirror_value('element', element_type) }})
                end
            )[0]
        )[0]
    {%- else -%}
        try_cast({{ raw }} as {{ type }})
    {%- endif -%}
{%- endmacro %}
