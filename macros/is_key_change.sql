{#-
    True for an update that moved a row to a new primary key: it ends the old key's record and
    carries that record's values over to the new key. `prefix` qualifies the columns (`sequin.`).
-#}
{% macro is_key_change(prefix='') -%}
    (
        {{ prefix }}action = 'update'
        and {{ prefix }}old_record_pk is not null
        and {{ prefix }}old_record_pk != {{ prefix }}record_pk
    )
{%- endmacro %}
