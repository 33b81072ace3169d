-- The consumers seed's patterns split into a schema part and a table part, matched apart
-- (`table_matches`), so `a.b` + `c` and `a` + `b.c` never meet. The first dot outside double
-- quotes splits them, as in Postgres: `"my.schema".orders`, `public.*`; the quotes are dropped.
-- A pattern without such a dot has null parts and matches nothing (its data test fails).
with

consumers as (

    select * from {{ ref('consumers') }}

),

split as (

    select
        consumer_name,
        table_pattern,
        regexp_extract(table_pattern, '^("(?:[^"]|"")*"|[^".]*)\\.(.+)$', 1) as schema_part,
        regexp_extract(table_pattern, '^("(?:[^"]|"")*"|[^".]*)\\.(.+)$', 2) as table_part

    from consumers

),

final as (

    select
        consumer_name,
        table_pattern,
        case
            when schema_part like '"%"' then replace(substr(schema_part, 2, length(schema_part) - 2), '""', '"')
            when schema_part != '' then schema_part
        end as schema_glob,
        case
            when table_part like '"%"' then replace(substr(table_part, 2, length(table_part) - 2), '""', '"')
            when table_part != '' then table_part
        end as table_glob

    from split

)

select * from final
