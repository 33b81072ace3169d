{#-
    At most how many moves one row makes in the seq range (above, upto] of `relation`
    (sequin_events; the whole table without bounds): one more than the number of moves whose old
    key an earlier move of the range, in the same table, moved a row onto. A row's chain of moves
    has one first move; each later one is such a move. `key_move_bases` takes log2 of it in steps,
    so a range without chains (the common case, even with many moves) takes none. 0 when not
    executing. Only worth asking when the range holds moves (`count_key_moves`).
-#}
{% macro key_move_chain_bound(relation, above=none, upto=none) %}
    {%- if not execute -%}
        {{ return(0) }}
    {%- endif -%}
    {%- set query -%}
        with moves as (

            select source_id, source_schema, source_table, record_pk, old_record_pk, seq
            from {{ relation }}
            where
                {{ is_key_change() }}
                and seq > {{ above if above is not none else -1 }}
                and seq <= {{ upto if upto is not none else 9223372036854775807 }}

        )

        select count(*) + 1 as longest
        from moves as later
        left semi join moves as earlier
            on
                {{ columns_equal('later', 'earlier', ['source_id', 'source_schema', 'source_table']) }}
                and earlier.record_pk = later.old_record_pk
                and earlier.seq < later.seq
    {%- endset -%}
    {{ return(run_query(query).rows[0]['longest'] | int) }}
{% endmacro %}
