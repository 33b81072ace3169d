{#-
    What sequin_violations has checked, on its own Delta commit like sequin_events' consumed
    positions (`marked_commit`): per source, the greatest batch whose changes it compared with
    sequin_events, and the table id of the sequin_events it compared them with.
-#}
{% macro checked_mark_prefix() %}{{ return('wal_lake.checked_batches=') }}{% endmacro %}

{#- The mark: JSON of `sequin_table_id` and `batches` (source_id to batch), after checked_mark_prefix. -#}
{% macro checked_mark(batches, table_id) %}
    {{ return(checked_mark_prefix() ~ ({'sequin_table_id': table_id, 'batches': batches} | tojson)) }}
{% endmacro %}

{#- The mark on the newest commit of `relation` a run of it made, as a dict; none when none is trusted. -#}
{% macro checked_batches(relation) %}
    {%- if not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set payload = marked_commit(relation, checked_mark_prefix()) -%}
    {{ return(none if payload is none else fromjson(payload)) }}
{% endmacro %}

{#-
    Why sequin_violations (`relation`) cannot go on from its mark, as text, or '' when it can: no
    commit of it is marked, or sequin_events is not the table its last run compared with (rebuilt
    since, maybe from other landed changes).
-#}
{% macro checked_rebuild_reason(relation, sequin_relation) %}
    {%- set mark = checked_batches(relation) -%}
    {%- if mark is none -%}
        {{ return('no commit of it says which batches it checked') }}
    {%- elif mark['sequin_table_id'] != sequin_table_id(sequin_relation) -%}
        {{ return(sequin_relation.identifier ~ ' is not the table its last run compared with (rebuilt since)') }}
    {%- endif -%}
    {{ return('') }}
{% endmacro %}

{#-
    sequin_violations' batch ranges as an inline relation (source_id, after_batch, through_batch),
    on one line: per source, the batches past the one it checked up to the one sequin_events
    read. With none, one row that no batch falls in.
-#}
{% macro batch_ranges_relation(ranges) %}
    {%- set rows = [] -%}
    {%- for range in ranges or [{'source_id': '', 'after': 0, 'through': 0}] -%}
        {%- do rows.append('(' ~ sql_string(range.source_id) ~ ', ' ~ range.after ~ 'L, ' ~ range.through ~ 'L)') -%}
    {%- endfor -%}
    {{ return(
        'select * from values ' ~ rows | join(', ') ~ ' as batch_ranges (source_id, after_batch, through_batch)'
    ) }}
{% endmacro %}

{#-
    The least and greatest commit_lsn of the changes in sequin_violations' batch ranges (`ranges`),
    read from `relation` (int_events_consumable) before the run: the log's rows the run compares
    with lie between them, and Delta's file statistics on commit_lsn skip the rest of the log (a
    replayed old file widens the range, never wrongly narrows it); and how many changes they hold
    (the model broadcasts their positions only when they are few). None when there are no ranges,
    nothing in them, or not executing.
-#}
{% macro checked_lsn_bounds(relation, ranges) %}
    {%- if not execute or not ranges or model.resource_type != 'model' -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set query -%}
        select min(commit_lsn) as low, max(commit_lsn) as high, count(*) as changes
        from {{ relation }}
        where
            batch_id > {{ ranges | map(attribute='after') | min }}
            and batch_id <= {{ ranges | map(attribute='through') | max }}
    {%- endset -%}
    {%- set row = run_query(query).rows[0] -%}
    {{ return(none if row['low'] is none else {
        'low': row['low'] | int, 'high': row['high'] | int, 'changes': row['changes'] | int,
    }) }}
{% endmacro %}
