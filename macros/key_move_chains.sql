{#-
    The chains of key moves in the seq range (above, upto] of `relation` (sequin_events): rows
    moved again after an earlier move in the range brought them to the key they leave (A -> B -> C,
    A -> B -> A). Returns a list of [seq, chain_seq, position, previous_move_seq], one per move in
    a chain: the seq of the chain's first move, the move's place in it from 1, and the move before
    it (none for the first). Moves in no chain are left out. `key_move_bases` groups the moves by
    chain and lays their records over one another in order, in one pass; it checks every move's
    predecessor against its own and fails the query if one differs. None when more than
    `wal_lake_max_chained_key_moves` moves may be chained (a mass re-key done twice in one run):
    then the recursion resolves them. An empty list when not executing.

    Only the moves that may be chained come back (a move leaving the key an earlier one went to,
    and that earlier one), with the inserts and snapshot reads at the keys they leave: walked in
    seq order, a move continues the chain of the latest move onto the key it leaves, unless an
    insert or read put another row there since, as in the models' own anchors.
-#}
{% macro key_move_chains(relation, above=none, upto=none) %}
    {%- if not execute -%}
        {{ return([]) }}
    {%- endif -%}
    {%- set limit = var('wal_lake_max_chained_key_moves', 5000) | int -%}
    {%- set table_key = ['source_id', 'source_schema', 'source_table'] -%}
    {%- set in_range -%}
        {%- if above is not none %} and seq > {{ above }}{% endif %}
        {%- if upto is not none %} and seq <= {{ upto }}{% endif %}
    {%- endset -%}
    {%- set query -%}
        with moves as (

            select {{ table_key | join(', ') }}, record_pk, old_record_pk, seq
            from {{ relation }}
            where {{ is_key_change() }}{{ in_range }}

        ),

        chained as (

            select *
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

        ),

        new_rows as (

            select {{ table_key | join(', ') }}, record_pk, seq
            from {{ relation }} as touch
            where
                action in ('insert', 'read') and not {{ is_key_change('touch.') }}{{ in_range }}
                and exists (
                    select 1 from chained
                    where
                        {{ columns_equal('chained', 'touch', table_key) }}
                        and chained.old_record_pk = touch.record_pk and chained.seq > touch.seq
                )

        )

        select
            to_json(array({{ table_key | join(', ') }}, old_record_pk)) as from_key,
            to_json(array({{ table_key | join(', ') }}, record_pk)) as to_key,
            seq
        from chained
        union all
        select
            cast(null as string) as from_key,
            to_json(array({{ table_key | join(', ') }}, record_pk)) as to_key,
            seq
        from new_rows
        order by seq
        limit {{ limit + 1 }}
    {%- endset -%}
    {%- set rows = run_query(query).rows -%}
    {%- if rows | length > limit -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set move_at = {} -%}
    {%- set placed = {} -%}
    {%- set chains = [] -%}
    {%- for row in rows -%}
        {%- set seq = row['seq'] | int -%}
        {%- if row['from_key'] is none -%}
            {%- do move_at.update({row['to_key']: none}) -%}
        {%- else -%}
            {%- set previous = move_at.get(row['from_key']) -%}
            {%- set chain_seq, position = placed[previous] if previous is not none else (seq, 0) -%}
            {%- do placed.update({seq: (chain_seq, position + 1)}) -%}
            {%- do move_at.update({row['to_key']: seq}) -%}
            {%- do chains.append([seq, chain_seq, position + 1, previous]) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(chains) }}
{% endmacro %}
