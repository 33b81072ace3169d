{#-
    The Spark type a Kafka Connect type (as the Debezium ingestion records it:
    `debezium_envelope.connect_type`) maps to, as SQL over the lowercased type text `text`, the
    named types from connect_types:
    - int16, int32, int64 -> smallint, int, bigint; float32, float64 -> float, double; boolean;
    - org.apache.kafka.connect.data.Decimal(p,s) (decimal.handling.mode=precise) -> decimal(p,s) up
      to precision 38, else string; a string whose propagated Postgres type is NUMERIC(p,s)
      (decimal.handling.mode=string with column.propagate.source.type) -> decimal(p,s) likewise;
    - io.debezium.time.Date and Connect's Date -> date; io.debezium.time.Timestamp, MicroTimestamp,
      NanoTimestamp and Connect's Timestamp (a local date-time as time since the epoch) ->
      timestamp_ntz; io.debezium.time.ZonedTimestamp (ISO-8601 text) -> timestamp;
    - io.debezium.data.Json -> variant; bytes and io.debezium.data.Bits -> binary;
    - anything else (string, Uuid, Enum, the times and durations, VariableScaleDecimal, geometry)
      -> string: mirror_value writes a time as Postgres does (`10:00:00.5`), a variable-scale
      decimal as its digits, the rest as sent;
    - array<T> -> array<T's type>.

    The types named in connect_types are one lookup in a map, and the array's wrapping is added
    around one copy of the element's type: see postgres_spark_type for why (Java code size).
-#}
{% macro connect_spark_type(text) -%}
    {%- set connect = "regexp_replace(" ~ text ~ ", ' [(].*[)]$', '')" -%}
    {%- set propagated = "regexp_extract(" ~ text ~ ", ' [(](.*)[)]$', 1)" -%}
    {%- set element = "regexp_replace(" ~ connect ~ ", '^array<(.*)>$', '$1')" -%}
    {%- set named = {} -%}
    {%- for name, known in connect_types().items() if known.spark_type != 'string' -%}
        {%- do named.update({name: known.spark_type}) -%}
    {%- endfor -%}
    {%- set is_array = connect ~ " like 'array<%>'" -%}
    concat(
        case when {{ is_array }} then 'array<' else '' end,
        coalesce(
            {{ spark_type_map(named) }}[{{ element }}],
            case
                when {{ element }} rlike '^org[.]apache[.]kafka[.]connect[.]data[.]decimal[(][0-9]+,[0-9]+[)]$'
                    then {{ decimal_spark_type(element) }}
                when {{ element }} = 'string' and {{ propagated }} rlike '^(numeric|decimal)[(][0-9]+,[0-9]+[)]$'
                    then {{ decimal_spark_type(propagated) }}
                else 'string'
            end
        ),
        case when {{ is_array }} then '>' else '' end
    )
{%- endmacro %}
