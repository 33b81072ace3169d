{#-
    The numbers Debezium 2.x sends for a Postgres timestamp's `infinity` and `-infinity` in an
    epoch encoding (`connect_encoding`), as a dict of those two texts to the number's text; empty
    for any other encoding. Debezium reads an infinite timestamp as the Postgres JDBC driver's
    sentinel instant (9223372036825200000 and -9223372036832400000 microseconds from the epoch) and
    counts it in the type's unit: milliseconds for Timestamp, microseconds for MicroTimestamp; a
    NanoTimestamp's infinity is the largest and smallest 64-bit number. None is a date: the mirrors
    hold no value for them and mirror_rejects says they were infinite. (A ZonedTimestamp's infinity
    is the text `infinity` itself.)
-#}
{% macro connect_infinity(encoding) -%}
    {{ return({
        'epoch_millis': {'infinity': '9223372036825200', '-infinity': '-9223372036832400'},
        'epoch_micros': {'infinity': '9223372036825200000', '-infinity': '-9223372036832400000'},
        'epoch_nanos': {'infinity': '9223372036854775807', '-infinity': '-9223372036854775808'},
    }.get(encoding, {})) }}
{%- endmacro %}
