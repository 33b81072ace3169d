{#-
    The columns of one source table's mirror, from column_registry (`registry`): a list of dicts
    with `name`, `source_type` (the latest the capture sent), `spark_type` (the mirror's type) and
    `note` ('' or why the mirror's type is not the source type's own), ordered as they appeared:
    by first position, then by place in that change.

    A column's mirror type starts as its first source type's Spark type. A later source type
    changes it when it widens it (`mirror_type_widens`: int to bigint, numeric(10,2) to
    numeric(12,2)); one that does not (bigint to int, int to text) leaves it, and the note says so:
    values that do not convert are rejected (mirror_rejects). A change between two types that map
    to the same Spark type (varchar(20) to text) changes nothing.
    The registry is read once per invocation (`run_query_once`); an empty list when not executing.
-#}
{% macro mirror_columns(registry, source_id, source_schema, source_table) %}
    {%- if not execute -%}
        {{ return([]) }}
    {%- endif -%}
    {%- set query -%}
        select
            source_id,
            source_schema,
            source_table,
            column_name,
            source_type,
            spark_type,
            first_commit_lsn,
            first_commit_idx,
            coalesce(column_position, 0) as column_position
        from {{ real_table(registry) }}
        order by source_id, source_schema, source_table, first_commit_lsn, first_commit_idx, column_position, column_name
    {%- endset -%}
    {%- set columns = [] -%}
    {%- set by_name = {} -%}
    {%- for row in run_query_once(query).rows
        if row['source_id'] == source_id and row['source_schema'] == source_schema
        and row['source_table'] == source_table -%}
        {%- set name = row['column_name'] -%}
        {%- set known = by_name.get(name) -%}
        {%- if known is none -%}
            {%- set column = {
                'name': name, 'source_type': row['source_type'], 'spark_type': row['spark_type'], 'note': '',
            } -%}
            {%- if row['spark_type'] == 'string' and modules.re.search(
                '^(numeric|decimal)|connect[.]data[.]decimal|variablescaledecimal|[(](numeric|decimal)',
                row['source_type'] | lower) -%}
                {%- do column.update({'note': 'numeric without a precision of 38 digits or less: kept as text'}) -%}
            {%- endif -%}
            {%- do by_name.update({name: column}) -%}
            {%- do columns.append(column) -%}
        {%- else -%}
            {%- if mirror_type_widens(known.spark_type, row['spark_type']) -%}
                {%- do known.update({
                    'spark_type': row['spark_type'],
                    'note': 'widened from ' ~ known.source_type ~ ' to ' ~ row['source_type'],
                }) -%}
            {%- elif row['spark_type'] != known.spark_type -%}
                {%- do known.update({
                    'note': 'the source changed it to ' ~ row['source_type'] ~ ', which does not widen '
                        ~ known.spark_type ~ ': kept, values that do not convert are rejected',
                }) -%}
            {%- endif -%}
            {%- do known.update({'source_type': row['source_type']}) -%}
        {%- endif -%}
    {%- endfor -%}
    {{ return(columns) }}
{% endmacro %}
