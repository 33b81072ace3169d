{#- Fails for every combination of `columns` that appears on more than one row. -#}
{% test unique_combination(model, columns) %}

with

validation_errors as (

    select
        {{ columns | join(', ') }},
        count(*) as occurrences

    from {{ model }}
    group by {{ columns | join(', ') }}
    having count(*) > 1

)

select * from validation_errors

{% endtest %}
