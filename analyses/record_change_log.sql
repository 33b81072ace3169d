-- What happened to one record, in order? Every change of customer 1 in the ordered change log.
{% set source_table = 'customers' %}
{% set record_pk = '["1"]' %}

select
    seq,
    source_id,
    commit_lsn_text,
    commit_idx,
    committed_at,
    action,
    record,
    changes,
    old_record_pk

from {{ ref('sequin_events') }}
where
    source_schema = 'public'
    and source_table = '{{ source_table }}'
    and (record_pk = '{{ record_pk }}' or old_record_pk = '{{ record_pk }}')
order by seq
