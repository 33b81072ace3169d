{#- A LIKE pattern that matches what the glob `glob` does: `*` is the only wildcard. -#}
{% macro glob_to_like(glob) -%}
    replace(replace(replace(replace({{ glob }}, '\\', '\\\\'), '%', '\\%'), '_', '\\_'), '*', '%')
{%- endmacro %}
