{#-
    A predicate true for int_events_consumable's rows past their source's consumed position
    (`consumed`, consumed_positions): past its commit_lsn, or at it with a greater commit_idx. A
    source not listed has consumed nothing; `true` with nothing consumed. sequin_events keeps only
    such rows (the others are replays or violations), and events_past counts only them.
-#}
{% macro consumed_position_passed(consumed) -%}
    {%- if not consumed -%}
        true
    {%- else -%}
        not (
        {%- for row in consumed | sort(attribute='source_id') %}
            {{ 'or ' if not loop.first }}(source_id = {{ sql_string(row.source_id) }}
                and (commit_lsn < {{ row.commit_lsn }}
                    or (commit_lsn = {{ row.commit_lsn }} and commit_idx <= {{ row.commit_idx }})))
        {%- endfor %}
        )
    {%- endif -%}
{%- endmacro %}
