{#-
    A predicate true for the rows of `alias` (sequin_events' rows) at or past what each source
    consumed (`consumed`, consumed_positions): of a source it lists, with a commit_lsn at or above
    the one it consumed. A change an incremental run selects lies past its source's consumed
    position, so it can equal only such a row: sequin_events' merge reads no other
    (`merge_target_predicate`), and Delta's statistics on commit_lsn skip the log's older files.
    A source not listed has no row in the table yet. Only comparisons of source_id and commit_lsn.
-#}
{% macro at_or_past_consumed(consumed, alias) -%}
    {%- for row in consumed | sort(attribute='source_id') %}
        {{ 'or ' if not loop.first }}({{ alias }}.source_id = {{ sql_string(row.source_id) }}
            and {{ alias }}.commit_lsn >= {{ row.commit_lsn }})
    {%- endfor %}
{%- endmacro %}
