{#-
    The greatest sequin_events seq a consumer model has applied. The model stamps it on its own
    Delta commit (commit user metadata `wal_lake.consumed_seq=N`, set by `stamp_consumed_seq`), so
    the mark is written in the same atomic commit as the rows: a crash leaves both or neither.
    Falls back to the greatest seq in the table when no stamped commit is found.
-#}
{% macro consumed_seq(relation) %}
    {%- if not execute -%}
        {{ return(0) }}
    {%- endif -%}
    {%- set history = run_query('describe history ' ~ relation ~ ' limit 50') -%}
    {%- for row in history.rows -%}
        {%- set metadata = row['userMetadata'] -%}
        {%- if metadata and metadata.startswith('wal_lake.consumed_seq=') -%}
            {{ return(metadata.split('=')[1] | int) }}
        {%- endif -%}
    {%- endfor -%}
    {%- set fallback = run_query('select coalesce(max(seq), 0) as seq from ' ~ relation) -%}
    {{ return(fallback.rows[0]['seq'] | int) }}
{% endmacro %}

{#- Pre-hook: every Delta commit of this session until `unstamp_consumed_seq` carries the mark. -#}
{% macro stamp_consumed_seq(seq) %}
    set spark.databricks.delta.commitInfo.userMetadata = wal_lake.consumed_seq={{ seq }}
{% endmacro %}

{% macro unstamp_consumed_seq() %}
    reset spark.databricks.delta.commitInfo.userMetadata
{% endmacro %}

{#-
    The greatest seq of sequin_events when a consumer model starts: the run applies seq up to it
    and, when it writes (run, build), stamps it on its commit. Unit tests override this macro.
-#}
{% macro sequin_seq_upto(sequin_relation) %}
    {%- if not execute -%}
        {{ return(0) }}
    {%- endif -%}
    {%- set upto = run_query('select coalesce(max(seq), 0) as seq from ' ~ sequin_relation).rows[0]['seq'] | int -%}
    {%- if flags.WHICH in ('run', 'build') -%}
        {%- do run_query(stamp_consumed_seq(upto)) -%}
    {%- endif -%}
    {{ return(upto) }}
{% endmacro %}
