{#-
    True for a change that moved a row to a new primary key: any change that names an old key other
    than its own (an update of the key; for Debezium, the create that follows the delete of the old
    key). It ends the old key's record and carries that record's values over to the new key.
    `prefix` qualifies the columns (`sequin.`).
-#}
{% macro is_key_change(prefix='') -%}
    (
        {{ prefix }}old_record_pk is not null
        and {{ prefix }}old_record_pk != {{ prefix }}record_pk
    )
{%- endmacro %}
