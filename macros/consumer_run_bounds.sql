{#-
    Everything a consumer model reads before it renders, in one place, so a unit test overrides it
    with one dict. Returns the run's seq range (consumed, upto] and what is in it:
    - consumed: the greatest seq already applied (`consumed_seq`); 0 on a full refresh.
    - upto: the greatest seq of sequin_events now. Fixed here, so rows landed during the run wait
      for the next one.
    - key_moves: how many updates in the range moved a row to a new primary key. The model leaves
      its moved-key joins out when there are none (the common case) and broadcasts a few.
    Only reads: stamping `upto` on the model's commit is the model's own step.
    All 0 when not executing, so the parse renders the plan without moves.
-#}
{% macro consumer_run_bounds(relation, sequin_relation) %}
    {%- if not execute -%}
        {{ return({'consumed': 0, 'upto': 0, 'key_moves': 0}) }}
    {%- endif -%}
    {%- set consumed = consumed_seq(relation) if is_incremental() else 0 -%}
    {%- set upto = run_query(
        'select coalesce(max(seq), 0) as seq from ' ~ sequin_relation
    ).rows[0]['seq'] | int -%}
    {%- set key_moves = run_query(
        'select count(*) as moves from ' ~ sequin_relation
        ~ ' where seq > ' ~ consumed ~ ' and seq <= ' ~ upto ~ ' and ' ~ is_key_change()
    ).rows[0]['moves'] | int -%}
    {{ return({'consumed': consumed, 'upto': upto, 'key_moves': key_moves}) }}
{% endmacro %}
