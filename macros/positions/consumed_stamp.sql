{#-
    The consumed positions a run of sequin_events leaves on its own Delta commit (commit user
    metadata, like the seq stamps of the models that read by seq): `consumed_mark` writes them,
    `mark_commits` puts the mark on the session for the run's merge, and `consumed_stamp` reads it
    back. The mark rides on the commit that writes the rows: a crash
    leaves both or neither.
-#}
{% macro consumed_mark_prefix() %}{{ return('wal_lake.consumed_positions=') }}{% endmacro %}

{#-
    The mark of a run that consumed `past` (events_past's positions: per source, the greatest
    batch and position it read) on top of `consumed` (what the table held before): per source, the
    greater of the two. A JSON list of [source_id, batch_id, commit_lsn, commit_idx], then
    `@` and `generation` when there is one (consumable_generation, read before `past` was:
    consumed_generation reads it back).
-#}
{% macro consumed_mark(consumed, past, generation=none) %}
    {%- set by_source = {} -%}
    {%- for row in (consumed | list) + (past | list) -%}
        {%- set position = [row.batch_id | int, row.commit_lsn | int, row.commit_idx | int] -%}
        {%- set known = by_source.get(row.source_id) -%}
        {%- if known is none -%}
            {%- do by_source.update({row.source_id: position}) -%}
        {%- else -%}
            {%- set later = position[1:] if position[1:] > known[1:] else known[1:] -%}
            {%- do by_source.update({row.source_id: [[known[0], position[0]] | max] + later}) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set rows = [] -%}
    {%- for source_id in by_source | sort -%}
        {%- do rows.append([source_id] + by_source[source_id]) -%}
    {%- endfor -%}
    {{ return(consumed_mark_prefix() ~ (rows | tojson) ~ ('@' ~ generation if generation else '')) }}
{% endmacro %}

{#-
    Puts `mark` (consumed_mark, checked_mark) on the session's Delta commits until the model's
    post-hook clears it (`unstamp_consumed_seq`), so it rides on the commit that writes the model's
    rows; with none, clears any mark instead, so that no earlier model's mark can reach the table.
    Only in a run that writes (writes_this_model). The marks are JSON, where a semicolon can stand
    only inside a string: it is written as a JSON escape, since Spark's SET ends a value at one.
    The post-hooks carry the mark on a commit of its own when the merge wrote nothing
    (`stamp_unwritten_run`).
-#}
{% macro mark_commits(mark) %}
    {%- if writes_this_model() -%}
        {%- if mark is none -%}
            {%- do run_query(unstamp_consumed_seq()) -%}
        {%- else -%}
            {%- do run_query(
                'set spark.databricks.delta.commitInfo.userMetadata = ' ~ (mark | replace(';', '\\u003b'))
            ) -%}
        {%- endif -%}
    {%- endif -%}
{% endmacro %}

{#-
    The consumed positions on the newest commit of `relation` (sequin_events) that a run of the
    model made (`marked_commit`), as rows of source_id, batch_id, commit_lsn, commit_idx; none when
    there is no such commit to trust. `after_its_run`: asked by a model after sequin_events in the
    same invocation (sequin_violations), so not the answer sequin_events read before its commit.
-#}
{% macro consumed_stamp(relation, after_its_run=false) %}
    {%- set payload = marked_commit(relation, consumed_mark_prefix(), after_its_run) -%}
    {%- if payload is none -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set rows = [] -%}
    {%- for source_id, batch_id, commit_lsn, commit_idx in fromjson(payload.rpartition(']')[0] ~ ']') -%}
        {%- do rows.append({
            'source_id': source_id, 'batch_id': batch_id, 'commit_lsn': commit_lsn, 'commit_idx': commit_idx
        }) -%}
    {%- endfor -%}
    {{ return(rows) }}
{% endmacro %}

{#-
    The generation on sequin_events' (`relation`) newest marked commit (consumed_mark's, after
    the positions): what int_events_consumable read had as of that run (consumable_generation).
    None when the mark has none or no commit can be trusted (consumed_stamp).
-#}
{% macro consumed_generation(relation) %}
    {%- set payload = marked_commit(relation, consumed_mark_prefix()) -%}
    {%- set generation = payload.rpartition(']')[2] if payload is not none else '' -%}
    {{ return(generation[1:] if generation.startswith('@') else none) }}
{% endmacro %}

{#-
    What follows `prefix` in the user metadata of the newest commit of `relation` that a run of
    its model marked with it; none when no commit can be trusted to describe the table's rows.
    Walking back from the newest commit (the last 50, `describe history`, once per invocation and
    `after_its_run`): a commit that carries the mark and writes the model's rows (MERGE, a create,
    or stamp_unwritten_run's table property) gives it; a commit that leaves every row as it was
    (OPTIMIZE, VACUUM, a table property, added columns) is passed over; any other commit (a DELETE,
    a RESTORE, a write without the mark) means the mark may no longer describe the rows: none.
-#}
{% macro marked_commit(relation, prefix, after_its_run=false) %}
    {%- set carriers = [
        'MERGE', 'WRITE', 'CREATE TABLE AS SELECT', 'REPLACE TABLE AS SELECT',
        'CREATE OR REPLACE TABLE AS SELECT', 'SET TBLPROPERTIES'
    ] -%}
    {%- set keeps_rows = [
        'OPTIMIZE', 'VACUUM START', 'VACUUM END', 'SET TBLPROPERTIES', 'UNSET TBLPROPERTIES',
        'ADD COLUMNS', 'CHANGE COLUMN', 'UPGRADE PROTOCOL', 'ADD CONSTRAINT', 'DROP CONSTRAINT'
    ] -%}
    {%- set history = run_query_once(
        recent_history_query(relation), key=recent_history_key(relation, marked=true, after_its_run=after_its_run)
    ) -%}
    {%- for commit in history.rows -%}
        {%- set metadata = commit['userMetadata'] or '' -%}
        {%- if metadata.startswith(prefix) and commit['operation'] in carriers -%}
            {{ return(metadata[prefix | length:]) }}
        {%- elif commit['operation'] not in keeps_rows -%}
            {{ return(none) }}
        {%- endif -%}
    {%- endfor -%}
    {{ return(none) }}
{% endmacro %}
