{#-
    Every touch of a source record key, from sequin_events: the contract's one definition of a
    touch, which source_records folds (a seq range at a time) and record_history versions (all of it).

    sequin (sequin_events) -> changes (which keys each touches) -> touches (one or two per change)

    - An insert, update, delete or snapshot read of a keyed table touches its record_pk.
    - A change that moved a row to a new key (`is_key_change`: it names an old key other than its
      own, an update of the key or Debezium's create after the old key's delete) also touches the
      old key, as a
      delete at the same seq: the old key's record ends there.
    - A truncate touches no key (the folds read it from sequin_events, per table); a logical
      message touches nothing; a keyless table's changes (no record_pk) have no record to touch
      (keyless_changes counts them).

    One scan of sequin_events: each change yields its touches as an array, exploded. A view: Spark
    inlines it into the models that read it, and source_records' seq range reaches the scan of
    sequin_events through it.
-#}
with

sequin as (

    select * from {{ ref('sequin_events') }}

),

changes as (

    select
        *,
        action in ('insert', 'update', 'delete', 'read') and record_pk is not null as touches_its_key,
        {{ is_key_change() }} as is_key_change

    from sequin

),

touches as (

    select
        changes.source_id,
        changes.source_schema,
        changes.source_table,
        touch.record_pk,
        touch.old_record_pk,
        changes.seq,
        changes.commit_lsn,
        changes.commit_idx,
        changes.committed_at,
        touch.action,
        touch.record

    from changes
        lateral view explode(
            filter(
                array(
                    if(
                        changes.touches_its_key,
                        named_struct(
                            'record_pk', changes.record_pk,
                            'old_record_pk', changes.old_record_pk,
                            'action', changes.action,
                            'record', changes.record
                        ),
                        null
                    ),
                    -- The key a row moved away from: its record ends here.
                    if(
                        changes.is_key_change,
                        named_struct(
                            'record_pk', changes.old_record_pk,
                            'old_record_pk', cast(null as string),
                            'action', 'delete',
                            'record', {{ null_record() }}
                        ),
                        null
                    )
                ),
                candidate -> candidate is not null
            )
        ) touched as touch
    where changes.touches_its_key or changes.is_key_change

)

select * from touches
