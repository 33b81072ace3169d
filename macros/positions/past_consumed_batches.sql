{#-
    A filter on int_events_consumable's `batch_id` for the batches past what each source consumed
    (`consumed`, consumed_positions): past the greatest batch any source consumed, and a source that
    consumed less (one idle since) past its own. A source none consumed yet lands only in batches
    past all of them. Comparisons of `source_id` and `batch_id` alone, so Delta's file statistics
    skip every batch already read, whichever source stays idle. `true` with nothing consumed.
-#}
{% macro past_consumed_batches(consumed) -%}
    {%- if not consumed -%}
        true
    {%- else -%}
        {%- set newest = consumed | map(attribute='batch_id') | map('int') | max -%}
        (
            batch_id > {{ newest }}
            {%- for row in consumed | sort(attribute='source_id') if row.batch_id | int < newest %}
                or (source_id = {{ sql_string(row.source_id) }} and batch_id > {{ row.batch_id }})
            {%- endfor %}
        )
    {%- endif -%}
{%- endmacro %}
