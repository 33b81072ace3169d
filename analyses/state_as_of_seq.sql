-- What did every source table look like as of a past position? The versions valid at seq N.
{% set as_of_seq = 100 %}

select
    source_id,
    source_schema,
    source_table,
    record_pk,
    record,
    valid_from_seq,
    valid_from,
    commit_lsn_text

from {{ ref('record_history') }}
where
    valid_from_seq <= {{ as_of_seq }}
    and (valid_to_seq is null or valid_to_seq > {{ as_of_seq }})
    and not is_deleted
order by source_id, source_schema, source_table, record_pk
