{#-
    The Delta table id of `relation` (sequin_events). Delta gives a table a new id whenever it is
    created or replaced (a full refresh), and keeps it through merges: a seq means the same change
    only under the same id. None when not executing. Read once per invocation (`invocation_cache`):
    a consumer model asks while it renders and again in its materialization, after sequin_events ran.
-#}
{% macro sequin_table_id(relation) %}
    {%- if not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {#- The table itself: under `dbt run --empty` a ref renders as a subquery that reads no rows. -#}
    {%- set table = api.Relation.create(
        database=relation.database, schema=relation.schema, identifier=relation.identifier, type='table'
    ) -%}
    {%- set known = invocation_cache('sequin_table_id') -%}
    {%- if (table | string) not in known -%}
        {%- do known.update({table | string: run_query('describe detail ' ~ table).rows[0]['id']}) -%}
    {%- endif -%}
    {{ return(known[table | string]) }}
{% endmacro %}
