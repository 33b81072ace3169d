{#-
    Whether this rendering is a model's, in a run that writes it (`dbt run`, `dbt build`), executing:
    not a parse, a compile, a show, nor a unit test (which renders the model against mocked inputs
    and writes no table). The steps that stamp a model's commits, mark its merge as skipped or
    change its table ahead of the merge run only then.
-#}
{% macro writes_this_model() %}
    {{ return(execute and flags.WHICH in ('run', 'build') and model.resource_type == 'model') }}
{% endmacro %}
