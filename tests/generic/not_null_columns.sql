{#-
    Fails for every row with a null in any of `columns`, naming them in `null_columns`: a model's
    not-null columns checked in one scan and one test node, where a not_null per column would scan
    the table once for each (each data test is a query, and a node dbt runs).
-#}
{% test not_null_columns(model, columns) %}

with

validation_errors as (

    select
        concat_ws(', ', {% for column in columns -%}
            if({{ column }} is null, '{{ column }}', null){{ ', ' if not loop.last }}
        {%- endfor %}) as null_columns,
        *

    from {{ model }}
    where {% for column in columns -%}
        {{ column }} is null{{ ' or ' if not loop.last }}
    {%- endfor %}

)

select * from validation_errors

{% endtest %}
