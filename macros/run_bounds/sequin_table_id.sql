{#-
    The Delta table id of `relation` (sequin_events). Delta gives a table a new id whenever it is
    created or replaced (a full refresh), and keeps it through merges: a seq means the same change
    only under the same id. None when not executing. Read once per invocation (`run_query_once`):
    a model that reads by seq asks while it renders and again in its materialization, after sequin_events ran.
-#}
{% macro sequin_table_id(relation) %}
    {%- if not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {{ return(run_query_once('describe detail ' ~ real_table(relation)).rows[0]['id']) }}
{% endmacro %}
