{#-
    An upper bound on how many moves one row makes in a row within the seq range (above, upto] of
    `relation` (sequin_events): 1 when no row moved twice, 2 for A -> B -> C, and so on. The models
    resolve chains of that length with as many self-joins of their move links in one query
    (`key_move_bases`), instead of a recursion that plans and runs the whole query again for every
    link. None when more than `wal_lake_max_chained_key_moves` moves may be chained (a mass re-key
    done twice in one run): then the recursion does it.

    A move can only continue a chain when an earlier move in the range went to the key it leaves,
    so only those moves (and the moves they continue) are read back. Walking them in seq order, a
    move is one link longer than the latest move onto the key it leaves: at least as long as its
    real chain (a row inserted at that key in between starts a new one). 0 when not executing.
-#}
{% macro key_move_chain_depth(relation, above=none, upto=none) %}
    {%- if not execute -%}
        {{ return(0) }}
    {%- endif -%}
    {%- set limit = var('wal_lake_max_chained_key_moves', 20000) | int -%}
    {%- set table_key = ['source_id', 'source_schema', 'source_table'] -%}
    {%- set query -%}
        with moves as (

            select {{ table_key | join(', ') }}, record_pk, old_record_pk, seq
            from {{ relation }}
            where {{ is_key_change() }}
            {%- if above is not none %} and seq > {{ above }}{% endif %}
            {%- if upto is not none %} and seq <= {{ upto }}{% endif %}

        )

        select
            to_json(array({{ table_key | join(', ') }}, old_record_pk)) as from_key,
            to_json(array({{ table_key | join(', ') }}, record_pk)) as to_key,
            seq

        from moves as move
        where
            exists (
                select 1 from moves as earlier
                where
                    {{ columns_equal('earlier', 'move', table_key) }}
                    and earlier.record_pk = move.old_record_pk and earlier.seq < move.seq
            )
            or exists (
                select 1 from moves as later
                where
                    {{ columns_equal('later', 'move', table_key) }}
                    and later.old_record_pk = move.record_pk and later.seq > move.seq
            )
        order by seq
        limit {{ limit + 1 }}
    {%- endset -%}
    {%- set chained = run_query(query).rows -%}
    {%- if chained | length > limit -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set chain_at = {} -%}
    {%- set longest = namespace(links=1) -%}
    {%- for move in chained -%}
        {%- set links = chain_at.get(move['from_key'], 0) + 1 -%}
        {%- do chain_at.update({move['to_key']: links}) -%}
        {%- if links > longest.links -%}
            {%- set longest.links = links -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(longest.links) }}
{% endmacro %}
