{#-
    Marks this run's Delta commits with `bounds` (`stamp_consumed_seq`), so the seq a model that
    reads by seq applies up to rides on its own commit; the model's post-hook
    (`unstamp_consumed_seq`) clears the mark. Only a run that writes stamps: not a parse, a
    compile or a unit test.
-#}
{% macro stamp_run(bounds) %}
    {%- if execute and flags.WHICH in ('run', 'build') and model.resource_type == 'model' -%}
        {%- do run_query(stamp_consumed_seq(bounds)) -%}
    {%- endif -%}
{% endmacro %}
