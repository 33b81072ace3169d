{#-
    Everything a model that folds sequin_events a seq range at a time (source_records,
    record_history) reads before it renders, in one place, so a unit test overrides it with one
    dict. Returns the run's seq range (consumed, upto]
    and what it was built from:
    - consumed: the greatest seq already applied (`seq_stamp`); 0 when not `incremental`.
    - upto: the greatest seq of sequin_events now. Fixed here, so rows landed during the run wait
      for the next one.
    - key_moves: how many changes in the range moved a row to a new primary key. The model leaves
      its moved-key steps out when there are none (the common case) and broadcasts a few.
    - key_move_chains: the moves in the range that continue or are continued by another move of
      the same row (`key_move_chains`; empty when none, none when too many to list).
    - truncates: how many truncates the range holds. source_records lays a run with no truncate
      over its stored records in the merge instead of reading them first.
      `truncates_void`: whether an arrival before its table's last truncate in the range counts
      for nothing when finding a move's predecessor (source_records drops what a truncate voided;
      record_history keeps every version, so it passes false).
    - sequin_table_id: what the model stamps beside `upto` (`stamp_consumed_seq`), so the next run
      can tell whether its seq still means the same change (`rebuild_reason`);
      subscriptions 'none': the fold is per source, whatever the consumers subscribe to.
    - sequin_generation: sequin_events' `table_generation`, read before the range, stamped too.
      While it is the one the model's stamp holds, no commit came since: the range is empty and
      nothing is queried (a run with nothing new).
    A model that only aggregates the range (key_column_spans) passes `chains=false`: no query
    lists the moves' chains.
    Only reads: stamping is the model's own step. Zeros when not executing, so the parse renders
    the plan without moves.
-#}
{% macro fold_run_bounds(relation, sequin_relation, incremental, truncates_void=true, chains=true) %}
    {%- if not execute -%}
        {{ return({
            'consumed': 0, 'upto': 0, 'key_moves': 0, 'key_move_chains': [], 'truncates': 0,
            'sequin_table_id': none, 'subscriptions': 'none', 'sequin_generation': none,
        }) }}
    {%- endif -%}
    {%- set stamp = seq_stamp(relation) if incremental else none -%}
    {%- if incremental and stamp is none -%}
        {{ exceptions.raise_compiler_error(relation ~ ' has no stamped commit to continue from') }}
    {%- endif -%}
    {%- set consumed = stamp.consumed_seq if incremental else 0 -%}
    {#- Before the range is read: a commit between the two makes the next run ask again. -#}
    {%- set generation = table_generation(sequin_relation) -%}
    {%- set table_id = sequin_table_id(sequin_relation) -%}
    {%- set unchanged = incremental and generation is not none and stamp.sequin_generation == generation -%}
    {%- if unchanged and stamp.sequin_table_id == table_id -%}
        {%- set range = {'upto': consumed, 'key_moves': 0, 'truncates': 0} -%}
    {%- else -%}
        {#-
            The range's end, its key moves and its truncates in one read of one snapshot: nothing
            newer, upto = consumed.
        -#}
        {%- set query -%}
            select
                coalesce(max(seq), {{ consumed }}) as upto,
                count_if({{ is_key_change() }}) as key_moves,
                count_if(action = 'truncate') as truncates
            from {{ sequin_relation }}
            where seq > {{ consumed }}
        {%- endset -%}
        {%- set range = run_query(query).rows[0] -%}
    {%- endif -%}
    {%- set upto = range['upto'] | int -%}
    {%- set key_moves = range['key_moves'] | int -%}
    {{ return({
        'consumed': consumed,
        'upto': upto,
        'key_moves': key_moves,
        'key_move_chains': key_move_chains(sequin_relation, consumed, upto, truncates_void=truncates_void)
            if key_moves and chains else [],
        'truncates': range['truncates'] | int,
        'sequin_table_id': table_id,
        'subscriptions': 'none',
        'sequin_generation': generation,
    }) }}
{% endmacro %}
