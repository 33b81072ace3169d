{#-
    The table `relation` names, as a relation that renders as its name: under `dbt run --empty` a
    `ref()` renders as a subquery that reads no rows, which `describe` statements cannot take and
    which would hide a table's recorded rows (stamps, history, the column registry).
-#}
{% macro real_table(relation) %}
    {{ return(api.Relation.create(
        database=relation.database, schema=relation.schema, identifier=relation.identifier, type='table'
    )) }}
{% endmacro %}
