{#-
    Folds an array of touches (structs with `seq`, `action`, `record` and `base`, in any order) onto
    a starting record in seq order, the way Postgres applies them: an insert or snapshot read
    replaces the row, a delete removes it, an update overlays the columns it sent and keeps the ones
    it left out (an unchanged TOASTed value, Debezium's unavailable placeholder: absent from the
    map, not null). A touch that moved the row from another key carries that key's record as `base`
    (`key_move_bases`): the columns it left out come from there, whatever its action.
-#}
{% macro fold_record(touches, start_record) -%}
    aggregate(
        array_sort(
            {{ touches }},
            (l, r) -> case when l.seq < r.seq then -1 when l.seq > r.seq then 1 else 0 end
        ),
        {{ start_record }},
        (acc, t) -> case
            when t.action in ('insert', 'read') and t.base is null then t.record
            when t.action = 'delete' then {{ null_record() }}
            else map_concat(
                map_filter(coalesce(t.base, acc, map()), (k, v) -> not map_contains_key(t.record, k)),
                t.record
            )
        end
    )
{%- endmacro %}
