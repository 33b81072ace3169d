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
-#}
{% macro postgres_spark_type(text) -%}
    {%- set element = "case when " ~ text ~ " like '%[]' then substr(" ~ text ~ ", 1, length(" ~ text
        ~ ") - 2) else " ~ text ~ " end" -%}
    {%- set scalar -%}
        case
            when {{ element }} in ('smallint', 'int2') then 'smallint'
            when {{ element }} in ('integer', 'int', 'int4') then 'int'
            when {{ element }} in ('bigint', 'int8') then 'bigint'
            when {{ element }} in ('real', 'float4') then 'float'
            when {{ element }} in ('double precision', 'float8') then 'double'
            when {{ element }} in ('boolean', 'bool') then 'boolean'
            when {{ element }} rlike '^(numeric|decimal)[(][0-9]+,[0-9]+[)]$' then {{ decimal_spark_type(element) }}
            when {{ element }} = 'date' then 'date'
            when {{ element }} rlike '^timestamp([(][0-9][)])? without time zone$' then 'timestamp_ntz'
            when {{ element }} rlike '^timestamp([(][0-9][)])? with time zone$' then 'timestamp'
            when {{ element }} = 'bytea' then 'binary'
            when {{ element }} in ('json', 'jsonb') then 'variant'
            else 'string'
        end
    {%- endset -%}
    case
        when {{ text }} like '%[]' then concat('array<', {{ scalar }}, '>')
        else {{ scalar }}
    end
{%- endmacro %}
