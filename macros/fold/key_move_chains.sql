{#-
    The chains of key moves in the seq range (above, upto] of `relation` (sequin_events): rows
    moved again after an earlier move in the range brought them to the key they leave (A -> B -> C,
    A -> B -> A). Returns a list of [seq, chain_seq, position, previous_move_seq], one per move in
    a chain: the seq of the chain's first move, the move's place in it from 1, and the move before
    it (none for the first). Moves in no chain are left out. `key_move_bases` groups the moves by
    chain and lays their records over one another in order, in one pass; it checks every move's
    predecessor against its own and fails the query if one differs. None when more than
    `wal_lake_max_chained_key_moves` moves continue another (a mass re-key done twice in one run):
    then the recursion resolves them. An empty list when not executing.

    The query finds each move's predecessor as the models' anchors do, without the records: the
    latest arrival at the key it leaves before it (an insert or snapshot read, or a move to that
    key), a move predecessor only when that arrival was a move. With `truncates_void` (a fold that
    drops what a truncate of its table voided, as source_records does), an arrival before the
    table's last truncate in the range counts for nothing. Only the moves with a move predecessor
    come back; the walk in seq order gives each its chain and position.
-#}
{% macro key_move_chains(relation, above=none, upto=none, truncates_void=false) %}
    {%- if not execute -%}
        {{ return([]) }}
    {%- endif -%}
    {%- set limit = var('wal_lake_max_chained_key_moves', 20000) | int -%}
    {%- set table_key = ['source_id', 'source_schema', 'source_table'] -%}
    {%- set in_range -%}
        {%- if above is not none %} and seq > {{ above }}{% endif %}
        {%- if upto is not none %} and seq <= {{ upto }}{% endif %}
    {%- endset -%}
    {%- set query -%}
        with moves as (

            select {{ table_key | join(', ') }}, old_record_pk, seq
            from {{ relation }}
            where {{ is_key_change() }}{{ in_range }}

        ),

        -- What puts a row at a key; the join below keeps the keys a move leaves.
        arrivals as (

            select {{ table_key | join(', ') }}, record_pk, seq, {{ is_key_change() }} as is_move
            from {{ relation }}
            where (action in ('insert', 'read') or {{ is_key_change() }}){{ in_range }}

        ),

        {%- if truncates_void %}

            last_truncates as (

                select {{ table_key | join(', ') }}, max(seq) as truncated_seq
                from {{ relation }}
                where action = 'truncate'{{ in_range }}
                group by {{ table_key | join(', ') }}

            ),
        {%- endif %}

        anchors as (

            select /*+ broadcast(moves) */
                moves.seq,
                max_by(struct(arrival.seq, arrival.is_move), arrival.seq) as anchor
            from moves
            inner join arrivals as arrival
                on
                    {{ columns_equal('arrival', 'moves', table_key) }}
                    and arrival.record_pk = moves.old_record_pk
                    and arrival.seq < moves.seq
            {%- if truncates_void %}
                left join last_truncates
                    on {{ columns_equal('last_truncates', 'moves', table_key) }}
                where last_truncates.truncated_seq is null or arrival.seq > last_truncates.truncated_seq
            {%- endif %}
            group by moves.seq

        )

        select seq, anchor.seq as previous_move_seq
        from anchors
        where anchor.is_move
        order by seq
        limit {{ limit + 1 }}
    {%- endset -%}
    {%- set rows = run_query(query).rows -%}
    {%- if rows | length > limit -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set placed = {} -%}
    {%- set chains = [] -%}
    {%- for row in rows -%}
        {%- set seq = row['seq'] | int -%}
        {%- set previous = row['previous_move_seq'] | int -%}
        {%- if previous not in placed -%}
            {%- do placed.update({previous: (previous, 1)}) -%}
            {%- do chains.append([previous, previous, 1, none]) -%}
        {%- endif -%}
        {%- set chain_seq, position = placed[previous] -%}
        {%- do placed.update({seq: (chain_seq, position + 1)}) -%}
        {%- do chains.append([seq, chain_seq, position + 1, previous]) -%}
    {%- endfor -%}
    {{ return(chains) }}
{% endmacro %}
