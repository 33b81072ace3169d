{#-
    CTE definitions ending in `move_bases`: for every touch of `touches` that moved a row from
    another key (`is_key_change`), the old key's last live record just before the move, the `base`
    fold_record lays the move over. One row per move: `table_key` columns, `record_pk` (the new
    key), `seq`, `base`.

    The old key's record before the move is its last touch that sent the whole row (an insert or a
    snapshot read), its record before the run (`starting_records`, or none), or the row an earlier
    move brought there, with the updates since laid over it. Deletes are skipped: a Debezium key
    change deletes the old key just before it creates the new one, and the move must carry the
    values from before that delete.

    An earlier move onto the old key makes a chain (A -> B -> C, A -> B -> A). Each move knows the
    move before it in its chain (`previous_move_seq`) and what it carries over that move's row
    (`carried`); its base is what every move of the chain up to it carried, laid over one another
    oldest first. Laying records over one another is associative, so the chains resolve by pointer
    jumping: step r lays, for every move, what the 2^(r-1) moves before it carried under its own,
    and jumps to the move before those. `longest_chain` (at most how many moves one row makes,
    `key_move_chain_bound`) sets the steps: log2 of it, none without chains. A fixed number of
    joins over the few moves, and no recursion, which Spark would re-plan and re-run from the
    touches on every level. A chain longer than var `wal_lake_max_key_move_chain` (default 100)
    fails the build, as before.
    `broadcast`: the moves are few; broadcast them so only the touches of moved-from keys shuffle.
-#}
{% macro key_move_bases(touches, starting_records, table_key, broadcast=true, longest_chain=none) -%}
    {%- set is_move = is_key_change('earlier.') -%}
    {%- set moves_table_key = 'moves.' ~ table_key | join(', moves.') -%}
    {%- set starting_record = 'first(starting.record, true)' if starting_records else null_record() -%}
    {%- set starting_join = (
        'left join ' ~ starting_records ~ ' as starting on '
        ~ columns_equal('moves', 'starting', table_key) ~ ' and moves.moved_from_pk = starting.record_pk'
    ) if starting_records else '' -%}
    {%- set limit = var('wal_lake_max_key_move_chain', 100) | int -%}
    {%- set longest = [limit if longest_chain is none else longest_chain | int, limit] | min -%}
    {#- Steps: the least r with 2^r >= longest. -#}
    {%- set steps = namespace(count=0, span=1) -%}
    {%- for _ in range(64) -%}
        {%- if steps.span < longest -%}
            {%- set steps.count = steps.count + 1 -%}
            {%- set steps.span = steps.span * 2 -%}
        {%- endif -%}
    {%- endfor -%}
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
    -- over the earlier move's own base (`previous_move_seq`). Step 0 of the jumps: each move's
    -- span is itself, and it jumps to the move before it.
    move_jumps_0 as (

        select
            {{ table_key | join(', ') }},
            record_pk,
            seq,
            case when anchor.is_move then anchor.seq end as jump,
            aggregate(
                array_sort(
                    filter(updates, u -> anchor is null or u.seq > anchor.seq),
                    (l, r) -> case when l.seq < r.seq then -1 when l.seq > r.seq then 1 else 0 end
                ),
                coalesce(anchor.record, starting_record),
                (acc, u) -> {{ overlay_record('acc', 'u.record') }}
            ) as carried,
            1 as span

        from move_anchors

    ),

    -- Each step: what the moves of the chain just before a move's span carried, laid under it.
    {%- for step in range(1, steps.count + 1) %}

    move_jumps_{{ step }} as (

        select {% if broadcast %}/*+ broadcast(before) */ {% endif %}
            {{ 'jumps.' ~ table_key | join(', jumps.') }},
            jumps.record_pk,
            jumps.seq,
            before.jump,
            {{ overlay_record('before.carried', 'jumps.carried') }} as carried,
            jumps.span + coalesce(before.span, 0) as span

        from move_jumps_{{ step - 1 }} as jumps
        left join move_jumps_{{ step - 1 }} as before
            on
                {{ columns_equal('jumps', 'before', table_key) }}
                and before.seq = jumps.jump

    ),
    {%- endfor %}

    move_bases as (

        select
            {{ table_key | join(', ') }},
            record_pk,
            seq,
            case
                when jump is not null or span > {{ limit }}
                    then raise_error(
                        'a row moved to a new key more than {{ limit }} times in one build '
                        || '(var wal_lake_max_key_move_chain)'
                    )
                else carried
            end as base

        from move_jumps_{{ steps.count }}

    )
{%- endmacro %}
