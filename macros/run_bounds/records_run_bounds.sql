{#-
    The seq range (consumed, upto] a model reading source_records (`records`) applies in this run,
    as a dict `stamp_consumed_seq` takes: `consumed`, the seq stamped on the model's (`relation`)
    last commit when `incremental`, else 0; `upto`, the seq stamped on source_records' last commit,
    read after it ran; `sequin_table_id`, source_records' table id (a rebuild of it rebuilds the
    model: `should_full_refresh`); `subscriptions`, the consumers' fingerprint when the model
    applies them (`subscriptions_relation`: consumer_records), 'none' otherwise (the mirrors),
    and their `subscriptions_generation`, stamped beside it: while it is unchanged, the fingerprint
    is the stamp's and is not read.
    Zeros when not executing.
-#}
{% macro records_run_bounds(relation, records, incremental, subscriptions_relation=none) %}
    {%- set bounds = {
        'consumed': 0, 'upto': 0, 'sequin_table_id': none, 'subscriptions': 'none', 'subscriptions_generation': none
    } -%}
    {%- if not execute -%}
        {{ return(bounds) }}
    {%- endif -%}
    {%- set records_stamp = seq_stamp(records, after_its_run=true) -%}
    {#- Before the fingerprint, which may be read: a change between the two makes the next run read it. -#}
    {%- set generation = subscriptions_generation(subscriptions_relation) -%}
    {%- if records_stamp is none -%}
        {{ exceptions.raise_compiler_error(records ~ ' has no stamped commit: build it before ' ~ relation) }}
    {%- endif -%}
    {%- do bounds.update({
        'upto': records_stamp.consumed_seq,
        'sequin_table_id': sequin_table_id(records),
        'subscriptions': subscriptions_fingerprint(subscriptions_relation, relation if incremental else none),
        'subscriptions_generation': generation,
    }) -%}
    {%- if incremental -%}
        {%- set stamp = seq_stamp(relation) -%}
        {%- if stamp is none -%}
            {{ exceptions.raise_compiler_error(relation ~ ' has no stamped commit to continue from') }}
        {%- endif -%}
        {%- do bounds.update({'consumed': stamp.consumed_seq}) -%}
    {%- endif -%}
    {{ return(bounds) }}
{% endmacro %}
