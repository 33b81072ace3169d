{#-
    The Kafka Connect types the typed mirrors know by name (lowercased, as `connect_type_pattern`
    matches them): each one's Spark type and the encoding Debezium sends its values in (see
    connect_encoding). One table for both: connect_spark_type maps the types from it, connect_encoding
    the encodings. A Decimal (its precision and scale in the name) and an array are not listed:
    both macros read those from the type's text. Any other Connect type is a `string` sent as text.
-#}
{% macro connect_types() -%}
    {{ return({
        'int16': {'spark_type': 'smallint', 'encoding': 'text'},
        'int32': {'spark_type': 'int', 'encoding': 'text'},
        'int64': {'spark_type': 'bigint', 'encoding': 'text'},
        'float32': {'spark_type': 'float', 'encoding': 'text'},
        'float64': {'spark_type': 'double', 'encoding': 'text'},
        'boolean': {'spark_type': 'boolean', 'encoding': 'text'},
        'bytes': {'spark_type': 'binary', 'encoding': 'base64'},
        'io.debezium.data.bits': {'spark_type': 'binary', 'encoding': 'base64'},
        'io.debezium.time.date': {'spark_type': 'date', 'encoding': 'epoch_days'},
        'org.apache.kafka.connect.data.date': {'spark_type': 'date', 'encoding': 'epoch_days'},
        'io.debezium.time.timestamp': {'spark_type': 'timestamp_ntz', 'encoding': 'epoch_millis'},
        'org.apache.kafka.connect.data.timestamp': {'spark_type': 'timestamp_ntz', 'encoding': 'epoch_millis'},
        'io.debezium.time.microtimestamp': {'spark_type': 'timestamp_ntz', 'encoding': 'epoch_micros'},
        'io.debezium.time.nanotimestamp': {'spark_type': 'timestamp_ntz', 'encoding': 'epoch_nanos'},
        'io.debezium.time.zonedtimestamp': {'spark_type': 'timestamp', 'encoding': 'text'},
        'io.debezium.time.time': {'spark_type': 'string', 'encoding': 'time_millis'},
        'org.apache.kafka.connect.data.time': {'spark_type': 'string', 'encoding': 'time_millis'},
        'io.debezium.time.microtime': {'spark_type': 'string', 'encoding': 'time_micros'},
        'io.debezium.time.nanotime': {'spark_type': 'string', 'encoding': 'time_nanos'},
        'io.debezium.data.variablescaledecimal': {'spark_type': 'string', 'encoding': 'variable_decimal'},
        'io.debezium.data.json': {'spark_type': 'variant', 'encoding': 'text'},
    }) }}
{%- endmacro %}
