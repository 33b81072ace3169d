{#-
    The regular expression (Java syntax, for `rlike`, and Python's `re`) a lowercased source type
    matches when it is a Kafka Connect type as the Debezium ingestion records it
    (`debezium_envelope.connect_type`): a primitive (int16/32/64, float32/64, boolean, string, bytes)
    or a semantic name (io.debezium.…, org.apache.kafka.…, a Decimal with `(precision,scale)`),
    possibly as `array<…>`, possibly followed by the propagated Postgres type in parentheses.
    No Postgres type name (what wal2json sends) matches, but `boolean`, which means the same in both.
-#}
{% macro connect_type_pattern() -%}
    ^(array<)?(int16|int32|int64|float32|float64|boolean|string|bytes|(io[.]debezium|org[.]apache[.]kafka)[.][a-z0-9_.]+([(][0-9]*,[0-9]+[)])?)>?( [(].*[)])?$
{%- endmacro %}
