{#-
    A value the calling model's rendering leaves for its materialization in this dbt invocation,
    under `kind`: the two share the manifest's flat graph (`graph`), and the invocation id keeps a
    value from reaching a later invocation of the same process. Set only in a run that writes
    (`writes_this_model`). `skip_merge_when`, `merge_target_predicate` and `merge_update_expressions`
    keep theirs here.
-#}
{% macro set_invocation_mark(kind, value) %}
    {%- if writes_this_model() -%}
        {%- set marks = graph.setdefault('wal_lake_' ~ kind, {}) -%}
        {%- do marks.update({model.unique_id: [invocation_id, value]}) -%}
    {%- endif -%}
{% endmacro %}

{#- The value `set_invocation_mark` left under `kind` for this model in this invocation, or none. -#}
{% macro invocation_mark(kind) %}
    {%- set mark = graph.get('wal_lake_' ~ kind, {}).get(model.unique_id) -%}
    {{ return(mark[1] if execute and mark and mark[0] == invocation_id else none) }}
{% endmacro %}
