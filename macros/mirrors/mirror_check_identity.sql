{#-
    Before an incremental run of a mirror: the table (`relation`) must hold the source table its
    model names. A mirror's name, once given to a table, stays that table's; a table that records
    another (`wal_lake.mirror_of`, set when the mirror is created) is refused with an error that
    names both, rather than merged into. A mirror created before tables recorded this gets the
    record now.
-#}
{% macro mirror_check_identity(relation, source_id, source_schema, source_table) %}
    {%- set expected = mirror_identity(source_id, source_schema, source_table) -%}
    {%- set recorded = none -%}
    {%- for row in run_query('show tblproperties ' ~ relation).rows if row[0] == 'wal_lake.mirror_of' -%}
        {%- set recorded = row[1] -%}
        {%- if recorded != expected -%}
            {{ exceptions.raise_compiler_error(
                relation ~ ' holds the mirror of ' ~ recorded ~ ', but its model now mirrors ' ~ expected
                ~ ': a mirror never changes tables. Give this table a model of its own, or rebuild the mirror for it with'
                ~ ' `dbt run --full-refresh -s ' ~ relation.identifier ~ '` (the old rows are dropped)'
            ) }}
        {%- endif -%}
    {%- else -%}
        {%- set literal = sql_string(expected) -%}
        {{ log(relation ~ ': records that it mirrors ' ~ expected, info=true) }}
        {%- do run_query('alter table ' ~ relation ~ " set tblproperties ('wal_lake.mirror_of' = " ~ literal ~ ')') -%}
    {%- endfor -%}
{% endmacro %}
