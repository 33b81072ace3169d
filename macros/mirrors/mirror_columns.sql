{#-
    The columns of one source table's mirror, from column_registry (`registry`): a list of dicts
    with `name`, `source_type` (the latest the capture sent), `spark_type` (the mirror's type),
    `note` ('' or why the mirror's type is not the source type's own) and `types` (every source type
    the column was sent with, each with `source_type`, `first_commit_lsn` and `first_commit_idx`, in
    the order they began: `mirror_column_value` decodes a value by the one in force), ordered as
    they appeared: by first position, then by place in that change.

    A column's mirror type starts as its first source type's Spark type. A later source type
    changes it when it widens it (`mirror_type_widens`: int to bigint, numeric(10,2) to
    numeric(12,2)); two decimals that do not widen one another take the decimal that holds both
    (`mirror_decimal_union`: numeric(12,2) then numeric(12,4) is decimal(14,4)) when it has 38 digits
    or fewer; any other change (bigint to int, int to text, numeric(38,0) to numeric(38,2)) leaves
    it, and the note says so:
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
                'types': [],
            } -%}
            {%- if row['spark_type'] == 'string' and modules.re.search(
                '^(numeric|decimal)|connect[.]data[.]decimal|variablescaledecimal|[(](numeric|decimal)',
                row['source_type'] | lower) -%}
                {%- do column.update({'note': 'numeric without a precision of 38 digits or less: kept as text'}) -%}
            {%- endif -%}
            {%- do by_name.update({name: column}) -%}
            {%- do columns.append(column) -%}
        {%- else -%}
            {%- set both = mirror_decimal_union(known.spark_type, row['spark_type']) -%}
            {%- if mirror_type_widens(known.spark_type, row['spark_type']) -%}
                {%- do known.update({
                    'spark_type': row['spark_type'],
                    'note': 'widened from ' ~ known.source_type ~ ' to ' ~ row['source_type'],
                }) -%}
            {%- elif both and mirror_type_widens(known.spark_type, both) -%}
                {%- do known.update({
                    'spark_type': both,
                    'note': 'widened to ' ~ both ~ ' to hold ' ~ known.source_type ~ ' and ' ~ row['source_type'],
                }) -%}
            {%- elif both == known.spark_type -%}
                {#- A decimal with fewer digits on both sides: every value fits as it is. -#}
            {%- elif row['spark_type'] != known.spark_type -%}
                {%- do known.update({
                    'note': 'the source changed it to ' ~ row['source_type'] ~ ', which does not widen '
                        ~ known.spark_type ~ ': kept, values that do not convert are rejected',
                }) -%}
            {%- endif -%}
            {%- do known.update({'source_type': row['source_type']}) -%}
        {%- endif -%}
        {%- do by_name[name].types.append({
            'source_type': row['source_type'],
            'first_commit_lsn': row['first_commit_lsn'],
            'first_commit_idx': row['first_commit_idx'],
        }) -%}
    {%- endfor -%}
    {{ return(columns) }}
{% endmacro %}
