{#-
    CTE definitions ending in `move_bases`: for every touch of `touches` that moved a row from
    another key (`is_key_change`), the old key's last live record just before the move, the `base`
    fold_record lays the move over. One row per move: `table_key` columns, `record_pk` (the new
    key), `seq`, `base`.

    The old key's record before the move is its last touch that sent the whole row (an insert or a
    snapshot read), its record before the run (`starting_records`, or none), or the row an earlier
    move brought there, with the updates since laid over it. Deletes are skipped: a Debezium key
    change deletes the old key just before it creates the new one, and the move must carry the
    values from before that delete. An earlier move onto the old key makes a chain (A -> B -> C,
    A -> B -> A), resolved oldest link first. With `chains` (key_move_chains: each chained move's
    chain and position, a list) in one grouping of the links; when the list is empty (no row moved
    twice, the common run) each move's base is what it carries, with no grouping at all; without
    it (more than `wal_lake_max_chained_key_moves` chained moves to list) by recursion, in
    a `with recursive` clause: at most Spark's `spark.sql.cteRecursionLevelLimit` (100) moves of one
    row in one build, each level planning and running the links' query again.
    `broadcast`: the moves are few; broadcast them so only the touches of moved-from keys shuffle.
-#}
{% macro key_move_bases(touches, starting_records, table_key, broadcast=true, chains=none) -%}
    {%- set is_move = is_key_change('earlier.') -%}
    {#- What a move whose predecessor is not the one key_move_chains counted does: fail the query. -#}
    {%- set wrong_chain = "raise_error('a key move continues another chain than key_move_chains counted')" -%}
    {%- set moves_table_key = 'moves.' ~ table_key | join(', moves.') -%}
    {%- set links_table_key = 'move_links.' ~ table_key | join(', move_links.') -%}
    {%- set starting_record = 'first(starting.record, true)' if starting_records else null_record() -%}
    {%- set starting_join = (
        'left join ' ~ starting_records ~ ' as starting on '
        ~ columns_equal('moves', 'starting', table_key) ~ ' and moves.moved_from_pk = starting.record_pk'
    ) if starting_records else '' -%}
    moves as (

        select
            {{ table_key | join(', ') }},
            record_pk,
            old_record_pk as moved_from_pk,
            seq

        from {{ touches }}
        where {{ is_key_change() }}

    ),

    -- The touches of keys a row moved away from: the only ones a move's base comes from.
    moved_from_touches as (

        select {% if broadcast %}/*+ broadcast(moves) */ {% endif %}{{ touches }}.*
        from {{ touches }}
        left semi join moves
            on
                {{ columns_equal(touches, 'moves', table_key) }}
                and {{ touches }}.record_pk = moves.moved_from_pk

    ),

    -- Per move: the old key's last whole-row touch before it, and every plain update before it.
    move_anchors as (

        select
            {{ moves_table_key }},
            moves.record_pk,
            moves.moved_from_pk,
            moves.seq,
            max_by(
                struct(earlier.seq, earlier.record, {{ is_move }} as is_move),
                earlier.seq
            ) filter (where earlier.action in ('insert', 'read') or {{ is_move }}) as anchor,
            collect_list(struct(earlier.seq, earlier.record))
                filter (where earlier.action = 'update' and not {{ is_move }}) as updates,
            {{ starting_record }} as starting_record

        from moves
        left join moved_from_touches as earlier
            on
                {{ columns_equal('moves', 'earlier', table_key) }}
                and moves.moved_from_pk = earlier.record_pk
                and earlier.seq < moves.seq
        {{ starting_join }}
        group by
            {{ moves_table_key }},
            moves.record_pk,
            moves.moved_from_pk,
            moves.seq

    ),

    -- What each move carries: the old key's whole row with its later updates laid over, or, when
    -- an earlier move brought the row to the old key, that move's record and updates, to be laid
    -- over the earlier move's own base (`previous_move_seq`).
    move_links as (

        select
            {{ table_key | join(', ') }},
            record_pk,
            moved_from_pk,
            seq,
            case when anchor.is_move then anchor.seq end as previous_move_seq,
            aggregate(
                array_sort(
                    filter(updates, u -> anchor is null or u.seq > anchor.seq),
                    (l, r) -> case when l.seq < r.seq then -1 when l.seq > r.seq then 1 else 0 end
                ),
                coalesce(anchor.record, starting_record),
                (acc, u) -> {{ overlay_record('acc', 'u.record') }}
            ) as carried

        from move_anchors

    ),

{%- if chains is none %}

    move_bases as (

        select
            {{ table_key | join(', ') }},
            record_pk,
            seq,
            carried as base

        from move_links
        where previous_move_seq is null

        union all

        select
            {{ links_table_key }},
            move_links.record_pk,
            move_links.seq,
            {{ overlay_record('move_bases.base', 'move_links.carried') }} as base

        from move_links
        inner join move_bases
            on
                {{ columns_equal('move_links', 'move_bases', table_key) }}
                and move_links.moved_from_pk = move_bases.record_pk
                and move_links.previous_move_seq = move_bases.seq

    )
{%- elif chains == [] %}

    -- No move in the run continues another (key_move_chains listed none): each move's base is what
    -- it carries. A move with a move before it would resolve wrong: the query fails instead.
    move_bases as (

        select
            {{ table_key | join(', ') }},
            record_pk,
            seq,
            case
                when previous_move_seq is not null
                    then {{ wrong_chain }}
                else carried
            end as base

        from move_links

    )
{%- else %}

    -- Where each move stands in its chain (`chains`, from key_move_chains): its chain's first move
    -- and its position. A move that no earlier move in the run led to is a chain of its own. A
    -- predecessor other than the one counted would resolve wrong: the query fails instead.
    move_chains as (

        select * from values
        {%- for seq, chain_seq, position, previous in chains %}
            ({{ seq }}L, {{ chain_seq }}L, {{ position }}, {{ previous ~ 'L' if previous is not none else 'cast(null as bigint)' }}){{ ',' if not loop.last }}
        {%- endfor %}
            as chain (seq, chain_seq, position, previous_move_seq)

    ),

    placed_links as (

        select
            {{ links_table_key }},
            move_links.record_pk,
            move_links.seq,
            coalesce(move_chains.chain_seq, move_links.seq) as chain_seq,
            coalesce(move_chains.position, 1) as position,
            case
                when not (move_links.previous_move_seq <=> move_chains.previous_move_seq)
                    then {{ wrong_chain }}
                else move_links.carried
            end as carried

        from move_links
        left join move_chains on move_links.seq = move_chains.seq

    ),

    chain_links as (

        select
            {{ table_key | join(', ') }},
            array_sort(
                collect_list(struct(position, seq, record_pk, carried)),
                (l, r) -> case when l.position < r.position then -1 when l.position > r.position then 1 else 0 end
            ) as links

        from placed_links
        group by {{ table_key | join(', ') }}, chain_seq

    ),

    -- Each move's base: the records of its chain up to it, laid over one another oldest first.
    move_bases as (

        select
            {{ table_key | join(', ') }},
            link.record_pk,
            link.seq,
            aggregate(
                slice(links, 1, link.position),
                {{ null_record() }},
                (acc, earlier) -> {{ overlay_record('acc', 'earlier.carried') }}
            ) as base

        from chain_links
        lateral view explode(links) chain_link as link

    )
{%- endif %}
{%- endmacro %}
