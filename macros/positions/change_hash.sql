{#-
    What a landed change says, as 16 hex digits: two landed rows at one position are the same change
    only when their hashes match (sequin_violations). The fields are the contract's: action, table,
    key, record, changes, old key.

    xxhash64 over the values themselves, not over their JSON text: writing every record as JSON
    first cost about three times the hash (1M changes, Intel). xxhash64 passes over a null without a
    trace, so which fields are null is hashed as a number of its own, and each map as its keys, then
    its values each beside its place (`arrays_zip`): {a: null, b: 'b'} and {a: 'b', b: null} differ.
-#}
{% macro change_hash(relation) -%}
    {%- set r = relation -%}
    lpad(
        hex(
            xxhash64(
                {{ r }}.action,
                {{ r }}.source_schema,
                {{ r }}.source_table,
                {{ r }}.record_pk,
                {{ r }}.old_record_pk,
                if({{ r }}.source_schema is null, 1, 0)
                + if({{ r }}.source_table is null, 2, 0)
                + if({{ r }}.record_pk is null, 4, 0)
                + if({{ r }}.old_record_pk is null, 8, 0)
                + if({{ r }}.record is null, 16, 0)
                + if({{ r }}.changes is null, 32, 0),
                map_keys({{ r }}.record),
                arrays_zip(map_values({{ r }}.record), sequence(1, size({{ r }}.record))),
                map_keys({{ r }}.changes),
                arrays_zip(map_values({{ r }}.changes), sequence(1, size({{ r }}.changes)))
            )
        ),
        16,
        '0'
    )
{%- endmacro %}

{#-
    The hash sequin_events logged before change_hash: sha2 of the same fields written as JSON (64 hex
    digits). sequin_violations compares a replay of such a row with it.
-#}
{% macro sha2_change_hash(relation) -%}
    {%- set r = relation -%}
    sha2(
        to_json(
            struct(
                {{ r }}.action,
                {{ r }}.source_schema,
                {{ r }}.source_table,
                {{ r }}.record_pk,
                {{ r }}.record,
                {{ r }}.changes,
                {{ r }}.old_record_pk
            )
        ),
        256
    )
{%- endmacro %}
