{#-
    Marks this run's Delta commits with `bounds` (`stamp_consumed_seq`), so the seq a model that
    reads by seq applies up to rides on its own commit; the model's post-hooks
    (`stamp_unwritten_run`, `unstamp_consumed_seq`) carry the mark when the merge wrote nothing,
    then clear it. An incremental run with no seq past the consumed one has nothing to merge: its
    merge is skipped (`skip_merge_when`). Only a run that writes (`writes_this_model`).
-#}
{% macro stamp_run(bounds) %}
    {%- if writes_this_model() -%}
        {%- do run_query(stamp_consumed_seq(bounds)) -%}
    {%- endif -%}
    {%- do skip_merge_when(is_incremental() and bounds.upto == bounds.consumed) -%}
{% endmacro %}
