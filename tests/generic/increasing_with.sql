{#-
    Fails for every row whose `column_name` does not strictly increase with `order_by` inside its
    `partition_by` group: the next row in `order_by` order must have a greater value.
-#}
{% test increasing_with(model, column_name, partition_by, order_by) %}

with

ordered as (

    select
        {{ column_name }} as value,
        lead({{ column_name }}) over (
            partition by {{ partition_by | join(', ') }}
            order by {{ order_by | join(', ') }}
        ) as next_value,
        {{ partition_by | join(', ') }},
        {{ order_by | join(', ') }}

    from {{ model }}

),

validation_errors as (

    select *
    from ordered
    where next_value is not null and next_value <= value

)

select * from validation_errors

{% endtest %}
