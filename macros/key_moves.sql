{#-
    How many updates in sequin_events' seq range (consumed, upto] moved a row to a new primary key.
    consumer_records leaves the moved-key machinery out of its plan when there are none (the
    common case) and broadcasts the moves when there are few. Returns 0 when not executing (the
    parse renders the plan without moves); unit tests override it.
-#}
{% macro key_moves(sequin_relation, consumed, upto) %}
    {%- if not execute -%}
        {{ return(0) }}
    {%- endif -%}
    {%- set counted = run_query(
        'select count(*) as moves from ' ~ sequin_relation
        ~ ' where seq > ' ~ consumed ~ ' and seq <= ' ~ upto
        ~ " and action = 'update' and old_record_pk is not null and old_record_pk != record_pk"
    ) -%}
    {{ return(counted.rows[0]['moves'] | int) }}
{% endmacro %}
