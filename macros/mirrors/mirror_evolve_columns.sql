{#-
    Brings an existing mirror table (`relation`) to its columns (`mirror_columns`) before a run
    writes to it: a column it lacks is added after the column before it (its earlier rows null), and a column whose mirror type
    widened is altered in place (Delta type widening, enabled on every mirror). A name Delta refuses
    without column mapping (a space, a comma, a brace, a parenthesis, `;`, `=`) turns the mapping on first on a mirror
    created without it. Runs the statements it needs and logs each.
-#}
{% macro mirror_evolve_columns(relation, columns) %}
    {%- set existing = {} -%}
    {%- for column in adapter.get_columns_in_relation(relation) -%}
        {%- do existing.update({column.name | lower: column.data_type | lower}) -%}
    {%- endfor -%}
    {#-
        A mirror created before mirrors used Delta column mapping takes only plain names: it gets
        the mapping first for a new column whose name Delta otherwise refuses.
    -#}
    {%- set odd_names = [] -%}
    {%- for column in columns if existing.get(column.name | lower) is none -%}
        {%- if column.name | select('in', ' ,;{}()\n\t=') | list -%}
            {%- do odd_names.append(column.name) -%}
        {%- endif -%}
    {%- endfor -%}
    {%- if odd_names -%}
        {%- set mapping = "alter table " ~ relation ~ " set tblproperties ('delta.columnMapping.mode' = 'name')" -%}
        {{ log(relation ~ ': ' ~ mapping, info=true) }}
        {%- do run_query(mapping) -%}
    {%- endif -%}
    {%- for column in columns -%}
        {%- set name = '`' ~ column.name | replace('`', '``') ~ '`' -%}
        {%- set current = existing.get(column.name | lower) -%}
        {%- set statement = none -%}
        {%- if current is none -%}
            {#- In its place among the source's columns, before the mirror's own (_wal_lake_*). -#}
            {%- set place = 'first' if loop.first else 'after `' ~ loop.previtem.name | replace('`', '``') ~ '`' -%}
            {%- set statement = 'alter table ' ~ relation ~ ' add columns (' ~ name ~ ' ' ~ column.spark_type ~ ' ' ~ place ~ ')' -%}
        {%- elif current != column.spark_type | lower and mirror_type_widens(current, column.spark_type) -%}
            {%- set statement = 'alter table ' ~ relation ~ ' alter column ' ~ name ~ ' type ' ~ column.spark_type -%}
        {%- endif -%}
        {%- if statement -%}
            {{ log(relation ~ ': ' ~ statement, info=true) }}
            {%- do run_query(statement) -%}
        {%- endif -%}
    {%- endfor -%}
{% endmacro %}
