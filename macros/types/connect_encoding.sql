{#-
    How Debezium encodes the values of a column of Kafka Connect type `source_type` (a type text as
    column_registry records it), for mirror_value to decode: a dict with `encoding` and, for an
    array, `item` (its items' type text) or, for a Decimal, `scale`. None for a type that is not a
    Connect type (wal2json's Postgres types: values as Postgres writes them). Encodings (of the
    named types from connect_types):
    - epoch_days (Date), epoch_millis / epoch_micros / epoch_nanos (Timestamp, MicroTimestamp,
      NanoTimestamp), time_millis / time_micros / time_nanos (Time, MicroTime, NanoTime): a number;
    - base64 (bytes, Bits): the JSON converter's base64 text;
    - decimal (Decimal, decimal.handling.mode=precise): the unscaled value's two's-complement bytes
      in base64, `scale` from the type; variable_decimal (VariableScaleDecimal): a JSON object
      `{"scale": s, "value": <those bytes>}`;
    - json_array (an array): a JSON array of the items' values, each encoded as its `item` type;
    - text: anything else, as sent (numbers, strings, ISO-8601 ZonedTimestamp, JSON text).
-#}
{% macro connect_encoding(source_type) -%}
    {%- set text = (source_type or '') | lower | trim -%}
    {%- if not modules.re.match(connect_type_pattern() | string, text) -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set connect = modules.re.sub(' [(].*[)]$', '', text) -%}
    {%- set array = modules.re.match('^array<(.*)>$', connect) -%}
    {%- set decimal_pattern = '^org[.]apache[.]kafka[.]connect[.]data[.]decimal[(][0-9]*,([0-9]+)[)]$' -%}
    {%- set decimal = modules.re.match(decimal_pattern, connect) -%}
    {%- if array -%}
        {{ return({'encoding': 'json_array', 'item': array.group(1)}) }}
    {%- elif decimal -%}
        {{ return({'encoding': 'decimal', 'scale': decimal.group(1) | int}) }}
    {%- endif -%}
    {{ return({'encoding': connect_types().get(connect, {}).get('encoding', 'text')}) }}
{%- endmacro %}
