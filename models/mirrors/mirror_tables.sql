{#-
    The catalog of the typed mirrors: one row per mirror and column, with the source table it
    mirrors, the column's source type (the latest the capture sent), the Spark type the mirror holds
    it in and a note when the two differ in more than mapping (numeric kept as text, a widened or a
    refused type change). The mirrors are the models with `meta.wal_lake_mirror` (`mirror_models`);
    their columns come from column_registry by the rules the mirrors themselves use
    (`mirror_columns`), rendered as rows by `mirror_catalog_rows`.
-#}
{{ config(materialized='table') }}

with

mirror_columns as (

    {{ mirror_catalog_rows(ref('column_registry')) }}

),

final as (

    select
        source_id,
        source_schema,
        source_table,
        mirror_relation,
        column_name,
        column_position,
        source_type,
        spark_type,
        type_note

    from mirror_columns

)

select * from final
