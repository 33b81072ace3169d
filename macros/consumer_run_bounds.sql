{#-
    Everything a consumer model reads before it renders, in one place, so a unit test overrides it
    with one dict. Returns the run's seq range (consumed, upto] and what it was built from:
    - consumed: the greatest seq already applied (`consumer_stamp`); 0 when not `incremental`.
    - upto: the greatest seq of sequin_events now. Fixed here, so rows landed during the run wait
      for the next one.
    - key_moves: how many changes in the range moved a row to a new primary key. The model leaves
      its moved-key steps out when there are none (the common case) and broadcasts a few.
    - longest_move_chain: at most how many moves of one row the range holds (`key_move_chain_bound`,
      only read when there are moves): how many steps `key_move_bases` takes to resolve chains.
    - truncates: how many truncates the range holds. The model leaves its truncate steps out when
      there are none (a unit test's dict may leave it out: then they stay in).
    - sequin_table_id, subscriptions: what the model stamps beside `upto` (`stamp_consumed_seq`), so
      the next run can tell whether its seq still means the same change and its consumers are the
      same (`consumer_rebuild_reason`).
    Only reads: stamping is the model's own step. Zeros when not executing, so the parse renders
    the plan without moves.

    One query answers upto, key_moves, truncates and subscriptions together; it reads only the files
    of sequin_events above `consumed` (Delta skips the others by their seq statistics), so an
    increment's bounds cost what the increment holds, not the history. The answers are kept for the
    invocation (`invocation_cache`): should_full_refresh asks first (through
    `consumer_rebuild_reason`), the model again.
-#}
{% macro consumer_run_bounds(relation, sequin_relation, subscriptions_relation, incremental) %}
    {%- if not execute -%}
        {{ return({
            'consumed': 0, 'upto': 0, 'key_moves': 0, 'longest_move_chain': 0, 'truncates': 0,
            'sequin_table_id': none, 'subscriptions': none,
        }) }}
    {%- endif -%}
    {%- set cache = invocation_cache('consumer_run_bounds') -%}
    {%- set key = (relation | string) ~ (' incremental' if incremental else ' full') -%}
    {%- if key in cache -%}
        {{ return(cache[key]) }}
    {%- endif -%}
    {%- set consumed = 0 -%}
    {%- if incremental -%}
        {%- set stamp = consumer_stamp(relation) -%}
        {%- if stamp is none -%}
            {{ exceptions.raise_compiler_error(relation ~ ' has no stamped commit to continue from') }}
        {%- endif -%}
        {%- set consumed = stamp.consumed_seq -%}
    {%- endif -%}
    {#- The other mode's answer, when a rebuild follows the incremental check, has the table id. -#}
    {%- set other = cache.get((relation | string) ~ (' full' if incremental else ' incremental')) -%}
    {%- set table_id = other.sequin_table_id if other else sequin_table_id(sequin_relation) -%}
    {%- set query -%}
        select
            coalesce(max(seq), {{ consumed }}) as upto,
            count_if({{ is_key_change() }}) as key_moves,
            count_if(action = 'truncate') as truncates,
            ({{ subscriptions_fingerprint_sql(subscriptions_relation) }}) as subscriptions
        from {{ sequin_relation }}
        where seq > {{ consumed }}
    {%- endset -%}
    {%- set row = run_query(query).rows[0] -%}
    {%- set upto = row['upto'] | int -%}
    {%- set key_moves = row['key_moves'] | int -%}
    {%- set bounds = {
        'consumed': consumed,
        'upto': upto,
        'key_moves': key_moves,
        'longest_move_chain': key_move_chain_bound(sequin_relation, consumed, upto) if key_moves else 0,
        'truncates': row['truncates'] | int,
        'sequin_table_id': table_id,
        'subscriptions': row['subscriptions'],
    } -%}
    {%- do cache.update({key: bounds}) -%}
    {{ return(bounds) }}
{% endmacro %}
