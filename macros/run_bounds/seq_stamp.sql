{#-
    What the latest stamped Delta commit of a model that reads by seq says it was built from (commit user
    metadata written by `stamp_consumed_seq`, read from the last 50 commits): `consumed_seq`, the
    greatest sequin_events seq applied; `sequin_table_id`, the Delta table id of the sequin_events
    that seq belongs to; `subscriptions`, the fingerprint of the consumers it was applied for.
    The mark rides on the same atomic commit as the rows: a crash leaves both or neither.
    None when no stamped commit is found (or not executing); a field the stamp lacks is none.
    The history is read once per invocation (`run_query_once`): the model's rendering and its
    materialization both ask, before the model's own commit. `after_its_run`: the stamp as the
    models after it in the run read it (the mirrors reading source_records'), cached apart from what
    the model itself read before its commit.
-#}
{% macro seq_stamp(relation, after_its_run=false) %}
    {%- if not execute -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set history = run_query_once(
        recent_history_query(relation), key=recent_history_key(relation, after_its_run=after_its_run)
    ) -%}
    {%- for row in history.rows -%}
        {%- set stamp = parse_seq_stamp(row['userMetadata']) -%}
        {%- if stamp is not none -%}
            {{ return(stamp) }}
        {%- endif -%}
    {%- endfor -%}
    {{ return(none) }}
{% endmacro %}

{#-
    A commit's user metadata as the stamp `stamp_consumed_seq` wrote (`consumed_seq`, an int;
    `sequin_table_id`, `subscriptions`, `sequin_generation` and `subscriptions_generation`, none
    when absent); none when it is not a stamp.
-#}
{% macro parse_seq_stamp(metadata) %}
    {%- if not metadata or not metadata.startswith('wal_lake.consumed_seq=') -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set stamp = {
        'consumed_seq': none, 'sequin_table_id': none, 'subscriptions': none, 'sequin_generation': none,
        'subscriptions_generation': none,
    } -%}
    {%- for field in metadata.removeprefix('wal_lake.').split(',') -%}
        {%- set name, value = field.split('=', 1) if '=' in field else (field, none) -%}
        {%- do stamp.update({name.strip(): value.strip() if value is not none else none}) -%}
    {%- endfor -%}
    {%- do stamp.update({'consumed_seq': stamp['consumed_seq'] | int}) -%}
    {{ return(stamp) }}
{% endmacro %}

{#-
    The statement that reads a table's last 50 commits, where its stamps are looked for
    (`seq_stamp`, `consumed_stamp`); one text for every reader, its answers kept under
    `recent_history_key`'s names.
-#}
{% macro recent_history_query(relation) %}
    {{- return('describe history ' ~ real_table(relation) ~ ' limit 50') -}}
{% endmacro %}

{#-
    The name `run_query_once` keeps an answer of `recent_history_query` under. `seq_stamp`'s
    (`marked` false) and `marked_commit`'s (true) are kept apart, and so is a read made by a model
    after the relation's model ran in the invocation (`after_its_run`): it asks again instead of
    taking an answer from before that run, unless that run committed nothing
    (`keep_history_after_unwritten_run`).
-#}
{% macro recent_history_key(relation, marked=false, after_its_run=false) %}
    {%- set notes = (['marked commit'] if marked else []) + (['after its run'] if after_its_run else []) -%}
    {{- return(recent_history_query(relation) ~ ((' (' ~ notes | join(', ') ~ ')') if notes else '')) -}}
{% endmacro %}

{#-
    `relation`'s recent history as this invocation read it before the model's run, under either
    name (`seq_stamp`'s or `marked_commit`'s); none when it was not read. Runs nothing.
-#}
{% macro history_read_before_run(relation) %}
    {%- set read = answered_once(recent_history_key(relation)) -%}
    {{- return(read if read is not none else answered_once(recent_history_key(relation, marked=true))) -}}
{% endmacro %}

{#-
    A model's run that committed nothing leaves its table's history as it was read before the run:
    the models after it in the invocation (`after_its_run`) take that answer instead of asking again.
-#}
{% macro keep_history_after_unwritten_run(relation, history) %}
    {%- set answers = answers_of_this_invocation() -%}
    {%- for marked in [false, true] -%}
        {%- do answers.update({recent_history_key(relation, marked=marked, after_its_run=true): history}) -%}
    {%- endfor -%}
{% endmacro %}
