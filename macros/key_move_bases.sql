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
    A -> B -> A), resolved oldest link first. With `chain_depth` (key_move_chain_depth: the most
    links a chain can have) by that many self-joins of the links in the one query; without it
    (too many chained moves to count) by recursion, in a `with recursive` clause: at most
    `wal_lake_max_key_move_chain` moves of one row in one build, each level planning and running
    the links' query again.
    `broadcast`: the moves are few; broadcast them so only the touches of moved-from keys shuffle.
-#}
{% macro key_move_bases(touches, starting_records, table_key, broadcast=true, chain_depth=none) -%}
    {%- set is_move = is_key_change('earlier.') -%}
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

{%- if chain_depth is none %}

    move_bases max recursion level {{ var('wal_lake_max_key_move_chain', 100) }} as (

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
{%- else %}

    -- Each move's chain, followed back `chain_depth` links by self-joins (at most one earlier move
    -- brought the row to the key a move leaves), the links' records laid over one another oldest
    -- first. A longer chain than the bound would be resolved wrong: the query fails instead.
    move_bases as (

        select {% if broadcast and chain_depth > 1 %}/*+ broadcast({% for level in range(1, chain_depth) %}link_{{ level }}{{ ', ' if not loop.last }}{% endfor %}) */ {% endif %}
            {{ 'link_0.' ~ table_key | join(', link_0.') }},
            link_0.record_pk,
            link_0.seq,
            case
                when link_{{ chain_depth - 1 }}.previous_move_seq is not null
                    then raise_error('a key-move chain is longer than the {{ chain_depth }} links key_move_chain_depth counted')
                else aggregate(
                    array({% for level in range(chain_depth - 1, -1, -1) %}link_{{ level }}.carried{{ ', ' if not loop.last }}{% endfor %}),
                    {{ null_record() }},
                    (acc, carried) -> {{ overlay_record('acc', 'carried') }}
                )
            end as base

        from move_links as link_0
        {%- for level in range(1, chain_depth) %}
            left join move_links as link_{{ level }}
                on
                    {{ columns_equal('link_' ~ level, 'link_' ~ (level - 1), table_key) }}
                    and link_{{ level }}.record_pk = link_{{ level - 1 }}.moved_from_pk
                    and link_{{ level }}.seq = link_{{ level - 1 }}.previous_move_seq
        {%- endfor %}

    )
{%- endif %}
{%- endmacro %}
