{#- Fails for every row of the model: for models that list problems, such as contract violations. -#}
{% test is_empty(model) %}

with

validation_errors as (

    select * from {{ model }}

)

select * from validation_errors

{% endtest %}
