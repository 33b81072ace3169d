{#-
    What int_events_consumable (`relation`) holds in the batches past those `consumed` lists
    (consumed_positions, past_consumed_batches), the rows sequin_events' incremental select starts
    from: `found`, whether there is any (none: the run has nothing to merge);
    `identity_lookups`, whether any landed with `old_identity` (REPLICA IDENTITY USING INDEX on
    columns other than the key), whose old key the model looks up (none: the lookup, which reads
    the run's states and the whole log, is not planned at all); `positions`, per source the greatest
    batch and position read, which the run's mark adds to what was consumed (consumed_mark);
    `transactions`, the run's transactions past the consumed positions in (source_id, commit_lsn)
    order, each with its first commit_idx, its span and its offset (the spans before it summed),
    when there are at most `max_transactions` of them, else none.

    An incremental run with `max_transactions` above 0 asks once, a row per transaction (a small
    run's whole seq numbering, which the model then inlines); when the run holds more (a backlog),
    or on a first run, it asks instead for a row per source, and the model sums the spans itself.
    `found` and `identity_lookups` true, `positions` empty, `transactions` none, when not executing
    or in a unit test (which has no table to ask): the model then renders every step, correct in
    every case; `found` true on a first run.
-#}
{% macro events_past(relation, consumed, max_transactions=0) %}
    {%- if not execute or model.resource_type != 'model' -%}
        {{ return({'found': true, 'identity_lookups': true, 'positions': [], 'transactions': none}) }}
    {%- endif -%}
    {%- if consumed and max_transactions > 0 -%}
        {%- set by_transaction = events_past_by_transaction(relation, consumed, max_transactions) -%}
        {%- if by_transaction is not none -%}
            {{ return(by_transaction) }}
        {%- endif -%}
    {%- endif -%}
    {%- set query -%}
        select
            source_id,
            max(batch_id) as batch_id,
            max(struct(commit_lsn, commit_idx)).commit_lsn as commit_lsn,
            max(struct(commit_lsn, commit_idx)).commit_idx as commit_idx,
            bool_or(old_identity is not null) as identity_lookups
        from {{ relation }}
        where {{ past_consumed_batches(consumed) }}
        group by source_id
    {%- endset -%}
    {%- set rows = run_query(query).rows -%}
    {{ return({
        'found': rows | length > 0 or not consumed,
        'identity_lookups': rows | selectattr('identity_lookups') | list | length > 0,
        'positions': rows,
        'transactions': none,
    }) }}
{% endmacro %}

{#-
    events_past as a row per transaction in the batches past `consumed`, or none when there are
    more than `max_transactions`. A transaction's first and last commit_idx count only its changes
    past the consumed position (`consumed_position_passed`), as sequin_events' `unconsumed` does;
    its greatest batch and commit_idx count every copy, as the per-source query does, so the mark
    is the same either way. A transaction with no change past the consumed position (a replay)
    gives the mark its batch and no offset.
-#}
{% macro events_past_by_transaction(relation, consumed, max_transactions) %}
    {%- set passed = consumed_position_passed(consumed) -%}
    {%- set query -%}
        select
            source_id,
            commit_lsn,
            max(batch_id) as batch_id,
            max(commit_idx) as commit_idx,
            min(case when {{ passed }} then commit_idx end) as first_idx,
            max(case when {{ passed }} then commit_idx end) as last_idx,
            bool_or(old_identity is not null) as identity_lookups
        from {{ relation }}
        where {{ past_consumed_batches(consumed) }}
        group by source_id, commit_lsn
        order by source_id, commit_lsn
        limit {{ max_transactions + 1 }}
    {%- endset -%}
    {%- set rows = run_query(query).rows -%}
    {%- if rows | length > max_transactions -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set by_source = {} -%}
    {%- set transactions = [] -%}
    {%- set total = namespace(span=0) -%}
    {%- for row in rows -%}
        {#- Rows come in (source_id, commit_lsn) order: a source's last row holds its greatest position. -#}
        {%- set known = by_source.get(row.source_id) -%}
        {%- do by_source.update({row.source_id: {
            'source_id': row.source_id,
            'batch_id': [row.batch_id | int, known.batch_id if known else row.batch_id | int] | max,
            'commit_lsn': row.commit_lsn | int,
            'commit_idx': row.commit_idx | int,
        }}) -%}
        {%- if row.first_idx is not none -%}
            {%- set span = (row.last_idx | int) - (row.first_idx | int) + 1 -%}
            {%- do transactions.append({
                'source_id': row.source_id,
                'commit_lsn': row.commit_lsn | int,
                'first_idx': row.first_idx | int,
                'seq_offset': total.span,
            }) -%}
            {%- set total.span = total.span + span -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return({
        'found': rows | length > 0,
        'identity_lookups': rows | selectattr('identity_lookups') | list | length > 0,
        'positions': by_source.values() | list,
        'transactions': transactions,
    }) }}
{% endmacro %}
