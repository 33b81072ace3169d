{#-
    CTE definitions ending in `resolved_changes`: the changes of `changes` (a CTE of sequin_events'
    new changes) with the old key of every update or delete landed with `old_identity` resolved.

    REPLICA IDENTITY USING INDEX on columns other than the key sends, for an update or delete, the
    identity's columns without the key: the change landed them in old_identity. The old key is the
    record_pk of the latest earlier non-delete state of the table (this run's changes or the
    log's, `log_relation`: sequin_events itself, none on a full refresh) whose record has those
    values on the identity's columns. An update's own record_pk is its new key, so a chain of
    moves in one run resolves without recursion. A delete resolves its record_pk, an update that
    changed the key its old_record_pk; a delete that nothing earlier resolves keeps a null
    record_pk (keyless_changes counts it).

    sequin_events renders it only when a change of the run has an old_identity
    (`events_past`): the lookup reads the run's states and the whole log.
-#}
{% macro identity_old_keys(changes, log_relation) -%}
    {%- set state_columns = [
        'source_id', 'source_schema', 'source_table', 'commit_lsn', 'commit_idx', 'action', 'record_pk', 'record'
    ] -%}
    lookups as (

        select
            source_id,
            source_schema,
            source_table,
            commit_lsn,
            commit_idx,
            old_identity,
            array_sort(map_keys(old_identity)) as identity_columns

        from {{ changes }}
        where old_identity is not null

    ),

    identities as (

        select
            source_id,
            source_schema,
            source_table,
            commit_lsn,
            commit_idx,
            identity_columns,
            transform(identity_columns, identity_column -> old_identity[identity_column]) as identity_values

        from lookups

    ),

    identity_columns as (

        select distinct
            source_id,
            source_schema,
            source_table,
            identity_columns

        from identities

    ),

    states as (

        select {{ state_columns | join(', ') }}
        from {{ changes }}
        {%- if log_relation is not none %}

            union all

            -- The log's states (none on a full refresh, whose history is all in this run).
            select {{ state_columns | join(', ') }}
            from {{ log_relation }}
        {%- endif %}

    ),

    known_states as (

        select * except (action)
        from states
        where action not in ('delete', 'truncate') and record_pk is not null

    ),

    identified_states as (

        select
            known_states.source_id,
            known_states.source_schema,
            known_states.source_table,
            known_states.commit_lsn,
            known_states.commit_idx,
            known_states.record_pk,
            identity_columns.identity_columns,
            transform(
                identity_columns.identity_columns, identity_column -> known_states.record[identity_column]
            ) as identity_values

        from known_states
        inner join identity_columns
            on
                known_states.source_id = identity_columns.source_id
                and known_states.source_schema = identity_columns.source_schema
                and known_states.source_table = identity_columns.source_table

    ),

    states_and_lookups as (

        select
            identified_states.*,
            true as is_known_state

        from identified_states
        left semi join identities
            on
                identified_states.source_id = identities.source_id
                and identified_states.source_schema = identities.source_schema
                and identified_states.source_table = identities.source_table
                and identified_states.identity_columns = identities.identity_columns
                and identified_states.identity_values = identities.identity_values

        union all

        select
            source_id,
            source_schema,
            source_table,
            commit_lsn,
            commit_idx,
            cast(null as string) as record_pk,
            identity_columns,
            identity_values,
            false as is_known_state

        from identities

    ),

    old_keys as (

        select
            source_id,
            commit_lsn,
            commit_idx,
            is_known_state,
            -- A known state at the lookup's own position (an update leaving its identity as it was)
            -- sorts after the lookup, so it is not taken for the state before the change.
            last(record_pk, true) over (
                partition by source_id, source_schema, source_table, identity_columns, identity_values
                order by commit_lsn, commit_idx, is_known_state
                rows between unbounded preceding and 1 preceding
            ) as old_key

        from states_and_lookups

    ),

    resolved_changes as (

        select
            {{ changes }}.* except (record_pk, old_record_pk),
            case
                when {{ changes }}.action = 'delete' then coalesce({{ changes }}.record_pk, old_keys.old_key)
                else {{ changes }}.record_pk
            end as record_pk,
            case
                when {{ changes }}.action = 'update' and old_keys.old_key != {{ changes }}.record_pk
                    then coalesce({{ changes }}.old_record_pk, old_keys.old_key)
                else {{ changes }}.old_record_pk
            end as old_record_pk

        from {{ changes }}
        left join old_keys
            on
                {{ changes }}.source_id = old_keys.source_id
                and {{ changes }}.commit_lsn = old_keys.commit_lsn
                and {{ changes }}.commit_idx = old_keys.commit_idx
                and not old_keys.is_known_state

    )
{%- endmacro %}
