{#-
    The Spark type a Postgres column type (as `format_type` writes it, which is what wal2json sends)
    maps to, as SQL over the lowercased type text `text`:
    - smallint, integer, bigint; real -> float, double precision -> double; boolean;
    - numeric(p,s) -> decimal(p,s) up to precision 38; unconstrained numeric, or a precision over
      38, -> string (Spark's decimal holds 38 digits at most);
    - text, character varying(n), character(n), uuid, name, citext, an enum or any other type
      without a Spark counterpart -> string;
    - date; timestamp without time zone -> timestamp_ntz; timestamp with time zone -> timestamp
      (an instant, shown in the session's time zone, UTC here);
    - json and jsonb -> variant (Spark 4's semi-structured type: fields read with variant_get,
      about twice as fast as parsing the text; BENCHMARKS.md); time and interval -> string (their
      text as Postgres writes it);
    - bytea -> binary;
    - an array of any of these (`text[]`) -> array<its element's type>.

    Written to stay small once Spark generates Java code for it: every `when` repeats the SQL of
    the element's text, so the types named exactly are one lookup in a map, and the array's
    wrapping is added around one copy of the element's type, not two. A CASE of a when per name
    with the mapping written twice compiled past the 64 KB a Java method may hold, and Spark ran
    column_registry's projection without generated code, logging the compiler's error.
-#}
{% macro postgres_spark_type(text) -%}
    {%- set element = "case when " ~ text ~ " like '%[]' then substr(" ~ text ~ ", 1, length(" ~ text
        ~ ") - 2) else " ~ text ~ " end" -%}
    {%- set named = {
        'smallint': 'smallint', 'int2': 'smallint',
        'integer': 'int', 'int': 'int', 'int4': 'int',
        'bigint': 'bigint', 'int8': 'bigint',
        'real': 'float', 'float4': 'float',
        'double precision': 'double', 'float8': 'double',
        'boolean': 'boolean', 'bool': 'boolean',
        'date': 'date',
        'bytea': 'binary',
        'json': 'variant', 'jsonb': 'variant',
    } -%}
    {%- set is_array = text ~ " like '%[]'" -%}
    concat(
        case when {{ is_array }} then 'array<' else '' end,
        coalesce(
            {{ spark_type_map(named) }}[{{ element }}],
            case
                when {{ element }} rlike '^(numeric|decimal)[(][0-9]+,[0-9]+[)]$' then {{ decimal_spark_type(element) }}
                when {{ element }} rlike '^timestamp([(][0-9][)])? without time zone$' then 'timestamp_ntz'
                when {{ element }} rlike '^timestamp([(][0-9][)])? with time zone$' then 'timestamp'
                else 'string'
            end
        ),
        case when {{ is_array }} then '>' else '' end
    )
{%- endmacro %}
