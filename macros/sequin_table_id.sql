{#-
    The Delta table id of `relation` (sequin_events). Delta gives a table a new id whenever it is
    created or replaced (a full refresh), and keeps it through merges: a seq means the same change
    only under the same id. None when not executing.
-#}
{% macro sequin_table_id(relation) %}
    {%- if not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {{ return(run_query('describe detail ' ~ relation).rows[0]['id']) }}
{% endmacro %}
